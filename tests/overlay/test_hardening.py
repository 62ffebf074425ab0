"""Issue 20, groups 1 and 2: rollback never writes another release's bytes, and the overlay trusts
nothing it did not write (links, hooks, config, owners, planted journals and trees, hostile names)."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest
import realdata
from conftest import GENERATOR, Sandbox, _make_venv
from hardening import commit_object, damaged, error, git, overlay_of, tree_entry, write_object
from test_overlay import assert_pristine

from vllm_shim_patch.errors import DamagedOverlayError
from vllm_shim_patch.fsutil import record_hash
from vllm_shim_patch.overlay.integrity import check_overlay, recovery
from vllm_shim_patch.overlay.layout import overlay_path
from vllm_shim_patch.overlay.repo import Overlay

INIT = "speculators/__init__.py"
WORKER = "speculators/data_generation/custom_worker.py"


def _edit(sb: Sandbox, path: str = INIT) -> None:
    target = sb.site / path
    target.write_bytes(target.read_bytes() + b"# a local fix\n")


def _foreign(installed: str, recorded: str, files: str = INIT) -> str:
    return error(
        f"speculators {installed} is installed where the overlay recorded speculators {recorded}, and 1 file of "
        f"speculators {installed} differs from its RECORD: {files}; the overlay holds no original of speculators "
        f"{installed}, so nothing was written: reinstall it (pip install --force-reinstall --no-deps "
        f"speculators=={installed}) and run again; rollback never writes another release's files")


# ------------------------------------------------------------------ group 1: wrong bytes


@pytest.mark.slow
def test_rollback_never_writes_another_releases_original(sandbox: Sandbox, speculators_wheel: Path) -> None:
    sandbox.pip_reinstall(realdata.speculators_wheel("0.4.0"))
    assert sandbox.run("--vllm-version", "0.16").returncode in (0, 1)
    assert overlay_of(sandbox).is_dir()
    sandbox.pip_reinstall(speculators_wheel)
    _edit(sandbox)
    before = sandbox.snapshot()
    r = sandbox.run("rollback")
    assert (r.returncode, r.stderr) == (2, _foreign("0.3.0", "0.4.0"))
    assert sandbox.snapshot() == before
    # Reinstalled as pip wrote it, 0.3.0 is its own original: nothing to write, nothing of 0.4.0.
    sandbox.pip_reinstall(speculators_wheel)
    again = sandbox.run("rollback")
    assert again.returncode == 0, again.stderr
    assert again.stdout == ("speculators 0.3.0 is already at original: nothing to do "
                            "(sha256 equal to RECORD for all 52 files)\n")
    assert_pristine(sandbox)


@pytest.mark.slow
def test_apply_accepting_edits_of_another_release_grafts_nothing(sandbox: Sandbox, speculators_wheel: Path) -> None:
    sandbox.pip_reinstall(realdata.speculators_wheel("0.4.0"))
    assert sandbox.run("--vllm-version", "0.16").returncode in (0, 1)
    sandbox.pip_reinstall(speculators_wheel)
    _edit(sandbox)
    edited = sandbox.snapshot()
    refused = sandbox.run("--vllm-version", "0.16")
    assert refused.returncode == 2
    assert refused.stderr.startswith(error("speculators 0.3.0 is installed where the overlay recorded speculators "
                                           "0.4.0, and 1 file")[:-1])
    assert sandbox.snapshot() == edited
    ok = sandbox.run("--vllm-version", "0.16", "--accept-modified")
    assert ok.returncode == 0, ok.stderr
    back = sandbox.run("rollback")
    assert back.returncode == 1, back.stderr
    # The original is 0.3.0 with the edit, every other file 0.3.0's own: no byte of 0.4.0.
    assert sandbox.snapshot() == edited


@pytest.mark.slow
def test_venv_path_reused_for_another_release(sandbox: Sandbox) -> None:
    assert sandbox.run("--vllm-version", "0.16").returncode == 0
    shutil.rmtree(sandbox.root)
    _make_venv(sandbox.root, realdata.speculators_wheel("0.4.0"))
    _edit(sandbox)
    before = sandbox.snapshot()
    r = sandbox.run("rollback")
    assert (r.returncode, r.stderr) == (2, _foreign("0.4.0", "0.3.0"))
    assert sandbox.snapshot() == before


@pytest.mark.slow
def test_one_overlay_reached_from_two_venvs(sandbox: Sandbox, sandbox_template: Path, tmp_path: Path) -> None:
    assert sandbox.run("--vllm-version", "0.16").returncode == 0
    root = tmp_path / "venv2"
    shutil.copytree(sandbox_template, root, symlinks=True)
    other = Sandbox(root, root / "bin" / "python", next(root.glob("lib/python3*/site-packages")), sandbox.state)
    _edit(other)
    mine, theirs = overlay_of(sandbox), overlay_path(sandbox.state, "speculators", other.site.resolve())
    theirs.symlink_to(mine)
    before, patched = other.snapshot(), sandbox.snapshot()
    for command in (["rollback"], ["--vllm-version", "0.17"], ["status"]):
        r = other.run(*command)
        assert (r.returncode, r.stderr) == (2, error(
            f"the overlay {theirs} is a symbolic link (to {mine}): an overlay records one environment, never two; "
            f"remove the link (rm {theirs}) and run again; nothing was changed"))
    theirs.unlink()
    shutil.copytree(mine, theirs, symlinks=True)
    r = other.run("rollback")
    assert (r.returncode, r.stderr) == (2, error(
        f"the overlay {theirs} was recorded for speculators in {sandbox.site.resolve()}, not in "
        f"{other.site.resolve()} (one overlay reached from two environments?): give this one its own (pass another "
        f"--state-dir, or move {theirs} away) and run again; nothing was changed"))
    assert other.snapshot() == before
    assert sandbox.snapshot() == patched


@pytest.mark.slow
def test_duplicated_record_line(sandbox: Sandbox) -> None:
    record = next(sandbox.site.glob("speculators-*.dist-info")) / "RECORD"
    lines = record.read_text().splitlines(keepends=True)
    record.write_text("".join(lines) + next(line for line in lines if line.startswith(GENERATOR + ",")))
    before = sandbox.snapshot()
    r = sandbox.run("--vllm-version", "0.16")
    assert r.returncode == 0, r.stderr
    assert sandbox.run("status").stdout.startswith(
        "patched (not rehearsed: no vLLM in the target): speculators 0.3.0 for vLLM 0.16")
    back = sandbox.run("rollback")
    assert back.returncode == 0, back.stderr
    assert back.stdout == ("rolled back speculators 0.3.0 to original: restored 2 files; sha256 equal to RECORD "
                           "for all 52 files\n")
    assert sandbox.snapshot() == before


@pytest.mark.slow
def test_symlinked_module_is_refused_before_anything_is_recorded(sandbox: Sandbox, tmp_path: Path) -> None:
    module = sandbox.site / GENERATOR
    elsewhere = tmp_path / "elsewhere.py"
    elsewhere.write_bytes(module.read_bytes())
    module.unlink()
    module.symlink_to(elsewhere)
    kept = elsewhere.read_bytes()
    r = sandbox.run("--vllm-version", "0.16")
    assert (r.returncode, r.stderr) == (2, error(
        f"{sandbox.site.resolve() / GENERATOR} is a symbolic link (a linked install?): reinstall speculators with "
        f"copied files (e.g. uv --link-mode=copy) to patch it; nothing was changed"))
    assert not sandbox.state.exists()
    assert sandbox.run("status").stdout.startswith("not tracked: speculators 0.3.0 was never patched by this tool")
    assert elsewhere.read_bytes() == kept


@pytest.mark.slow
def test_original_tag_moved_off_record_is_refused_before_writing(sandbox: Sandbox) -> None:
    assert sandbox.run("--vllm-version", "0.16").returncode == 0
    overlay = overlay_of(sandbox)
    git(overlay / "git", "tag", "-f", "original", "patched")
    patched = git(overlay / "git", "rev-parse", "patched")
    before = sandbox.snapshot()
    r = sandbox.run("rollback")
    assert (r.returncode, r.stderr) == (2, error(
        f"the overlay's original ({patched[:12]}) does not match speculators 0.3.0's RECORD: 2 files differ "
        f"({WORKER}, {GENERATOR}), so nothing was written; the overlay was changed outside this tool: move it away "
        f"(mv {overlay} {overlay}.damaged) and reinstall with pip install --force-reinstall --no-deps "
        f"speculators==0.3.0"))
    assert sandbox.snapshot() == before


# ------------------------------------------------------------------ group 2: the state dir is not trusted


@pytest.mark.slow
@pytest.mark.parametrize("name", ["lock", "pathspec", "state.json"])
def test_a_link_planted_in_the_overlay_is_never_followed(sandbox: Sandbox, tmp_path: Path, name: str) -> None:
    assert sandbox.run("--vllm-version", "0.17").returncode == 0
    overlay = overlay_of(sandbox)
    victim = tmp_path / "victim"
    victim.write_text("keep me\n")
    (overlay / name).unlink()
    (overlay / name).symlink_to(victim)
    before = sandbox.snapshot()
    for command in (["rollback"], ["--vllm-version", "0.16"], ["status"]):
        r = sandbox.run(*command)
        assert (r.returncode, r.stderr) == (2, error(
            f"{overlay / name} is a symbolic link, not a file this tool wrote: remove it (rm {overlay / name}) and "
            f"run again; nothing was changed"))
    assert victim.read_text() == "keep me\n"
    assert sandbox.snapshot() == before


@pytest.mark.slow
def test_hooks_planted_in_the_overlay_never_run(sandbox: Sandbox, tmp_path: Path) -> None:
    assert sandbox.run("--vllm-version", "0.17").returncode == 0
    overlay = overlay_of(sandbox)
    ran = tmp_path / "ran"
    for folder in (overlay / "git" / "hooks", overlay / "no-hooks"):
        folder.mkdir(exist_ok=True)
        for hook in ("pre-commit", "post-commit", "reference-transaction", "post-index-change", "post-rewrite"):
            (folder / hook).write_text(f"#!/bin/sh\necho {hook} >> {ran}\n")
            (folder / hook).chmod(0o755)
    back = sandbox.run("rollback")
    assert back.returncode == 0, back.stderr
    assert sandbox.run("--vllm-version", "0.16").returncode == 0
    assert not ran.exists()


@pytest.mark.slow
def test_fsmonitor_in_the_overlay_config_is_refused(sandbox: Sandbox, tmp_path: Path) -> None:
    assert sandbox.run("--vllm-version", "0.17").returncode == 0
    overlay = overlay_of(sandbox)
    ran, monitor = tmp_path / "ran", tmp_path / "monitor"
    monitor.write_text(f"#!/bin/sh\necho ran >> {ran}\n")
    monitor.chmod(0o755)
    git(overlay / "git", "config", "core.fsmonitor", str(monitor))
    before = sandbox.snapshot()
    for command in (["--vllm-version", "0.16"], ["rollback"]):
        r = sandbox.run(*command)
        assert (r.returncode, r.stderr) == (2, damaged(overlay, (
            f"the overlay's git config {overlay}/git/config sets 'core.fsmonitor', which this tool never writes "
            f"(git would act on it: a hook, an fsmonitor or a filter runs code)")))
    assert not ran.exists()
    assert sandbox.snapshot() == before


def test_git_runs_with_hooks_and_fsmonitor_off_whatever_the_config(tmp_path: Path) -> None:
    # Past the integrity check (a config changed while we run): the command line still wins.
    site = tmp_path / "site"
    (site / "pkg").mkdir(parents=True)
    (site / "pkg" / "mod.py").write_bytes(b"x = 1\n")
    ov = Overlay(tmp_path / "state" / "pkg-0123456789ab", site)
    ov.create(["pkg/mod.py"], "original\n")
    ran = tmp_path / "ran"
    script = tmp_path / "hook"
    script.write_text(f"#!/bin/sh\necho ran >> {ran}\n")
    script.chmod(0o755)
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    shutil.copy(script, hooks / "post-commit")
    ov.git("config", "core.fsmonitor", str(script))
    ov.git("config", "core.hooksPath", str(hooks))
    (site / "pkg" / "mod.py").write_bytes(b"x = 2\n")
    ov.commit(["pkg/mod.py"], "second\n")
    assert not ran.exists()


@pytest.mark.slow
@pytest.mark.parametrize("how", ["owner", "group-writable", "config-writable"])
def test_an_overlay_not_only_yours_is_refused(sandbox: Sandbox, how: str) -> None:
    assert sandbox.run("--vllm-version", "0.17").returncode == 0
    overlay = overlay_of(sandbox)
    me = os.geteuid()
    if how == "owner":
        os.chown(overlay, me + 12345, -1)
        message = (f"the overlay {overlay} is not yours: {overlay} is owned by uid {me + 12345}, you run as uid {me}; "
                   f"run as its owner, or take it over (chown -R {me} {overlay}) and run again; nothing was changed")
    else:
        path = overlay if how == "group-writable" else overlay / "git" / "config"
        mode = 0o775 if how == "group-writable" else 0o646
        path.chmod(mode)
        message = (f"the overlay {overlay} is writable by other users ({path} has mode {mode:04o}): fix it "
                   f"(chmod -R go-w {overlay}) and run again; nothing was changed")
    before = sandbox.snapshot()
    for command in (["rollback"], ["--vllm-version", "0.16"], ["status"]):
        r = sandbox.run(*command)
        assert (r.returncode, r.stderr) == (2, error(message))
    assert sandbox.snapshot() == before


def _planted_commit(overlay: Path, name: str, data: bytes) -> tuple[str, str]:
    """(HEAD, a commit of HEAD's tree plus `name`), made with git's own plumbing."""
    gitdir = overlay / "git"
    head = git(gitdir, "rev-parse", "HEAD")
    env = {"GIT_INDEX_FILE": str(overlay.parent / "planted-index")}
    git(gitdir, "read-tree", head, env=env)
    blob = git(gitdir, "hash-object", "-w", "--stdin", stdin=data)
    git(gitdir, "update-index", "--add", "--cacheinfo", f"100644,{blob},{name}", env=env)
    tree = git(gitdir, "write-tree", env=env)
    return head, git(gitdir, "commit-tree", tree, "-p", head, "-m", "planted")


def _journal(overlay: Path, head: str, to: str, name: str, data: bytes) -> None:
    (overlay / "journal.json").write_text(json.dumps({
        "op": "rollback", "pid": 1, "started": 0, "base_commit": head, "to_commit": to, "message": "planted\n",
        "package": "speculators 0.3.0", "files": {name: {"before": None, "after": record_hash(data)}}}))


@pytest.mark.slow
def test_a_planted_journal_naming_a_file_outside_record_writes_nothing(sandbox: Sandbox) -> None:
    assert sandbox.run("--vllm-version", "0.17").returncode == 0
    overlay = overlay_of(sandbox)
    payload = b"import os; os.system('touch /tmp/pwned')\n"
    head, planted = _planted_commit(overlay, "evil.pth", payload)
    _journal(overlay, head, planted, "evil.pth", payload)
    before = sandbox.snapshot()
    for command in (["rollback"], ["--vllm-version", "0.16"]):
        r = sandbox.run(*command)
        assert (r.returncode, r.stderr) == (2, damaged(overlay, (
            f"{overlay}/journal.json is damaged (it names evil.pth, which speculators 0.3.0's RECORD does not list), "
            f"so nothing was written")))
    assert not (sandbox.site / "evil.pth").exists()
    assert sandbox.snapshot() == before


@pytest.mark.slow
def test_a_journal_path_climbing_out_of_site_packages_is_refused(sandbox: Sandbox) -> None:
    assert sandbox.run("--vllm-version", "0.17").returncode == 0
    overlay = overlay_of(sandbox)
    head = git(overlay / "git", "rev-parse", "HEAD")
    _journal(overlay, head, head, "../evil.pth", b"x\n")
    r = sandbox.run("rollback")
    assert (r.returncode, r.stderr) == (2, damaged(overlay, (
        f"{overlay}/journal.json is damaged (it names '../evil.pth', not a path inside the package)")))
    assert not (sandbox.site.parent / "evil.pth").exists()


def test_integrity_rejects_a_tree_entry_named_dotdot(tmp_path: Path) -> None:
    site = tmp_path / "site"
    (site / "pkg").mkdir(parents=True)
    (site / "pkg" / "mod.py").write_bytes(b"x = 1\n")
    ov = Overlay(tmp_path / "state" / "pkg-0123456789ab", site)
    head = ov.create(["pkg/mod.py"], "original\n")
    blob = write_object(ov.gitdir, "blob", b"evil\n")
    inner = write_object(ov.gitdir, "tree", tree_entry("100644", "evil.pth", blob))
    outer = write_object(ov.gitdir, "tree", tree_entry("40000", "..", inner))
    planted = commit_object(ov.gitdir, outer, head)
    (ov.path / "journal.json").write_text(json.dumps({
        "op": "rollback", "base_commit": head, "to_commit": planted, "message": "m\n",
        "files": {"pkg/mod.py": {"before": None, "after": record_hash(b"evil\n")}}}))
    with pytest.raises(DamagedOverlayError) as info:
        check_overlay(ov.path, "pkg", "1.0")
    assert str(info.value) == (
        f"the overlay {ov.path} is damaged: tree {outer[:12]} holds '..' (mode 40000), which no file of a package "
        f"can be in the interrupted rollback's to commit ({planted[:12]}); {recovery(ov.path, 'pkg', '1.0')}")


@pytest.mark.slow
def test_metadata_name_with_a_path_is_refused(sandbox: Sandbox, tmp_path: Path) -> None:
    metadata = next(sandbox.site.glob("speculators-*.dist-info")) / "METADATA"
    metadata.write_text(metadata.read_text().replace("Name: speculators\n", "Name: ../escape/n\n", 1))
    for command in (["--vllm-version", "0.16"], ["status"], ["rollback"]):
        r = sandbox.run(*command)
        assert (r.returncode, r.stderr) == (2, error(
            "the installed METADATA names the distribution '../escape/n', which is not a valid distribution name: "
            "reinstall it with pip; nothing was written"))
    assert not (tmp_path / "escape").exists()
    assert not sandbox.state.exists()


@pytest.mark.slow
def test_overlay_files_are_not_group_writable_under_umask_002(sandbox: Sandbox) -> None:
    old = os.umask(0o002)
    try:
        assert sandbox.run("--vllm-version", "0.17").returncode == 0
    finally:
        os.umask(old)
    overlay = overlay_of(sandbox)
    for path in (overlay, *overlay.iterdir(), *(overlay / "git").iterdir()):
        assert not path.lstat().st_mode & (stat.S_IWGRP | stat.S_IWOTH), path
    assert sandbox.run("rollback").returncode == 0

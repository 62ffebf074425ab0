"""The overlay trusts nothing in its state folder it did not write: links, hooks, config, owners,
planted journals and trees, hostile names."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest
from conftest import Sandbox
from tampering import commit_object, damaged, error, git, overlay_of, tree_entry, write_object

from vllm_shim_patch.errors import DamagedOverlayError
from vllm_shim_patch.fsutil import record_hash
from vllm_shim_patch.overlay.integrity import check_overlay, recovery
from vllm_shim_patch.overlay.repo import Overlay


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

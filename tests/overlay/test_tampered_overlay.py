"""A tampered overlay or package is refused or reported, never followed: odd files where state files
belong, links in the package, tampered refs, config and trees, a held lock."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from conftest import GENERATOR, Sandbox, write_tree
from tampering import commit_object, damaged, error, overlay_of, tree_entry, write_object
from test_overlay import assert_pristine

from vllm_shim_patch.errors import DamagedOverlayError, UnsafeWriteError
from vllm_shim_patch.fsutil import NOT_A_FILE, hash_file
from vllm_shim_patch.overlay.integrity import check_overlay, recovery
from vllm_shim_patch.overlay.layout import tracked_paths
from vllm_shim_patch.overlay.lock import hold
from vllm_shim_patch.overlay.repo import Overlay

FILES = {"pkg/__init__.py": b"", "pkg/mod.py": b"x = 1\n"}


@pytest.fixture
def ov(tmp_path: Path) -> Overlay:
    overlay = Overlay(tmp_path / "state" / "pkg-0123456789ab", write_tree(tmp_path / "site", FILES),
                      allowed=sorted(FILES))
    overlay.create(sorted(FILES), "original\n")
    return overlay


def _refused(ov: Overlay, what: str) -> None:
    with pytest.raises(DamagedOverlayError) as info:
        check_overlay(ov.path, "pkg", "1.0")
    assert str(info.value) == f"{what}; {recovery(ov.path, 'pkg', '1.0')}"


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_state_json_that_is_a_fifo_or_a_folder(sandbox: Sandbox, kind: str) -> None:
    assert sandbox.run("--vllm-version", "0.16").returncode == 0
    state = overlay_of(sandbox) / "state.json"
    state.unlink()
    os.mkfifo(state) if kind == "fifo" else state.mkdir()
    before = sandbox.snapshot()
    for command in (["status"], ["rollback"]):
        r = sandbox.run(*command, timeout=60)  # a FIFO read would block forever
        assert (r.returncode, r.stderr) == (2, damaged(overlay_of(sandbox),
                                                      f"{state} is damaged (unreadable: not a regular file)"))
    assert sandbox.snapshot() == before


@pytest.mark.slow
def test_journal_json_that_is_a_link(sandbox: Sandbox, tmp_path: Path) -> None:
    assert sandbox.run("--vllm-version", "0.16").returncode == 0
    overlay = overlay_of(sandbox)
    victim = tmp_path / "journal-elsewhere.json"
    victim.write_text('{"op": "rollback"}')
    (overlay / "journal.json").symlink_to(victim)
    r = sandbox.run("rollback")
    assert (r.returncode, r.stderr) == (2, error(
        f"{overlay}/journal.json is a symbolic link, not a file this tool wrote: remove it (rm {overlay}/journal.json) "
        f"and run again; nothing was changed"))
    assert victim.read_text() == '{"op": "rollback"}'


@pytest.mark.slow
def test_overlay_git_folder_replaced_by_a_file(sandbox: Sandbox) -> None:
    assert sandbox.run("--vllm-version", "0.16").returncode == 0
    overlay = overlay_of(sandbox)
    subprocess.run(["rm", "-rf", str(overlay / "git")], check=True)
    (overlay / "git").write_text("gitdir: /somewhere/else\n")
    before = sandbox.snapshot()
    for command in (["status"], ["rollback"], ["--vllm-version", "0.17"]):
        r = sandbox.run(*command)
        assert (r.returncode, r.stderr) == (2, damaged(overlay, f"the overlay's {overlay}/git is not a folder"))
    assert sandbox.snapshot() == before


@pytest.mark.slow
def test_lock_that_is_a_folder(sandbox: Sandbox) -> None:
    assert sandbox.run("--vllm-version", "0.16").returncode == 0
    lock = overlay_of(sandbox) / "lock"
    lock.unlink()
    lock.mkdir()
    r = sandbox.run("rollback")
    assert (r.returncode, r.stderr) == (2, error(
        f"{lock} is not a plain file (a link, a folder or a FIFO): this tool never made it; remove it (rm -r {lock}) "
        f"and run again; nothing was changed"))


def test_packed_refs_pointing_the_original_at_a_path(ov: Overlay) -> None:
    ov.git("pack-refs", "--all")
    packed = ov.gitdir / "packed-refs"
    sha = ov.resolve("original")
    tag = " refs/tags/original"
    packed.write_text(packed.read_text().replace(sha + tag, "../../../../etc/passwd" + tag))
    _refused(ov, "the overlay's refs/tags/original holds '../../../../etc/passwd', not a commit")


def test_head_naming_a_file_outside_the_repository_is_never_read(ov: Overlay, tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("0123456789abcdef0123456789abcdef01234567\n")  # reads like a commit name
    (ov.gitdir / "HEAD").write_text(f"ref: ../../../{secret.name}\n")
    _refused(ov, f"the overlay's HEAD points at '../../../{secret.name}', not a branch or tag")


@pytest.mark.parametrize(("mode", "name"), [("120000", "mod.py"), ("100644", ".git"), ("160000", "sub"),
                                            ("100644", ".GIT")])
def test_integrity_rejects_links_submodules_and_dot_git_in_a_tree(ov: Overlay, mode: str, name: str) -> None:
    blob = write_object(ov.gitdir, "blob", b"/etc/passwd")
    tree = write_object(ov.gitdir, "tree", tree_entry(mode, name, blob))
    planted = commit_object(ov.gitdir, tree, ov.resolve("HEAD"))
    (ov.gitdir / "refs" / "tags" / "original").write_text(planted + "\n")
    _refused(ov, f"the overlay {ov.path} is damaged: tree {tree[:12]} holds {name!r} (mode {mode}), which no file "
                 f"of a package can be in the original ({planted[:12]})")


def test_git_config_include_is_refused(ov: Overlay, tmp_path: Path) -> None:
    (tmp_path / "more").write_text("[core]\n\tfsmonitor = /bin/true\n")
    with (ov.gitdir / "config").open("a") as config:
        config.write(f"[include]\n\tpath = {tmp_path / 'more'}\n")
    _refused(ov, f"the overlay's git config {ov.gitdir}/config sets 'include.path', which this tool never writes "
                 f"(git would act on it: a hook, an fsmonitor or a filter runs code)")


def test_replace_refs_planted_in_the_overlay_are_ignored(ov: Overlay) -> None:
    original = ov.git("rev-parse", "original:pkg/mod.py").strip()
    other = ov.git_bytes("hash-object", "-w", "--stdin", stdin="import evil\n").decode().strip()
    ov.git("replace", original, other)
    assert ov.tree_files("original", ["pkg/mod.py"]) == {"pkg/mod.py": b"x = 1\n"}


def test_record_paths_with_dotdot_are_never_tracked() -> None:
    assert tracked_paths(["pkg/mod.py", "pkg/../evil.pth", "./pkg/x.py", "pkg//y.py", "/abs.py", "pkg/mod.py",
                          "pkg\\win.py", "../../bin/tool"]) == ["pkg/mod.py"]


@pytest.mark.parametrize("path", ["evil.pth", "pkg/../evil.pth", "pkg/./mod.py"])
def test_writes_outside_record_are_refused_before_the_first_byte(ov: Overlay, path: str) -> None:
    with pytest.raises(UnsafeWriteError) as info:
        ov.write_files("apply", {"pkg/mod.py": b"y = 2\n", path: b"evil\n"}, ov.resolve("HEAD"))
    why = "the package's RECORD does not list it" if path == "evil.pth" else "it is not a plain path inside the package"
    assert str(info.value) == (f"refusing to write {ov.work_tree / path}: {why}; nothing was written (if the overlay "
                               f"names it, it was changed outside this tool: move {ov.path} away and run again)")
    assert (ov.work_tree / "pkg/mod.py").read_bytes() == b"x = 1\n"
    assert not ov.journal_file.exists()


def test_scratch_files_planted_as_links_are_replaced_not_followed(ov: Overlay, tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep me\n")
    for name in ("pathspec", "blob.partial"):
        (ov.path / name).unlink(missing_ok=True)
        (ov.path / name).symlink_to(victim)
    (ov.work_tree / "pkg/mod.py").write_bytes(b"x = 2\n")
    ov.commit(sorted(FILES), "second\n")
    ov.commit_tree(ov.resolve("HEAD"), {"pkg/mod.py": b"x = 3\n"}, "third\n")
    assert victim.read_text() == "keep me\n"


@pytest.mark.slow
def test_a_symlinked_folder_in_the_package_is_refused_before_recording(sandbox: Sandbox, tmp_path: Path) -> None:
    folder = sandbox.site / "speculators" / "data_generation"
    elsewhere = tmp_path / "elsewhere"
    folder.rename(elsewhere)
    folder.symlink_to(elsewhere)
    kept = {p.name: p.read_bytes() for p in elsewhere.glob("*.py")}
    r = sandbox.run("--vllm-version", "0.16")
    assert (r.returncode, r.stderr) == (2, error(
        f"{sandbox.site.resolve() / 'speculators' / 'data_generation'} is a symbolic link (a linked install?): "
        f"reinstall speculators with copied files (e.g. uv --link-mode=copy) to patch it; nothing was changed"))
    assert {p.name: p.read_bytes() for p in elsewhere.glob("*.py")} == kept
    assert not sandbox.state.exists()


@pytest.mark.slow
def test_a_module_turned_into_a_link_after_apply_is_not_written_through(sandbox: Sandbox, tmp_path: Path) -> None:
    assert sandbox.run("--vllm-version", "0.16").returncode == 0
    module = sandbox.site / GENERATOR
    outside = tmp_path / "outside.py"
    outside.write_bytes(b"# someone else's file\n")
    module.unlink()
    module.symlink_to(outside)
    r = sandbox.run("rollback")
    assert (r.returncode, r.stderr) == (2, error(
        f"{sandbox.site.resolve() / GENERATOR} is a symbolic link (a linked install?): reinstall speculators with "
        f"copied files (e.g. uv --link-mode=copy) to patch it; nothing was changed"))
    assert outside.read_bytes() == b"# someone else's file\n"


@pytest.mark.slow
def test_a_fifo_in_place_of_a_module_does_not_hang_status(sandbox: Sandbox) -> None:
    assert sandbox.run("--vllm-version", "0.16").returncode == 0
    config = sandbox.site / "speculators" / "config.py"
    config.unlink()
    os.mkfifo(config)
    assert hash_file(config) == NOT_A_FILE
    r = sandbox.run("status", timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("drifted: 1 file changed since the last recorded state: speculators/config.py")


@pytest.mark.slow
def test_rollback_while_apply_holds_the_lock(sandbox: Sandbox) -> None:
    assert sandbox.run("--vllm-version", "0.16").returncode == 0
    before = sandbox.snapshot()
    with hold(overlay_of(sandbox) / "lock"):
        r = sandbox.run("rollback")
    assert (r.returncode, r.stderr) == (2, error(
        f"another patch-speculators (pid {os.getpid()}) is working on this package; wait for it or run again "
        f"with --wait"))
    assert sandbox.snapshot() == before
    assert sandbox.run("rollback").returncode == 0
    assert_pristine(sandbox)


@pytest.mark.slow
def test_read_only_package_folder_changes_nothing(sandbox: Sandbox) -> None:
    folder = sandbox.site / "speculators" / "data_generation"
    before = sandbox.snapshot()
    subprocess.run(["chattr", "+i", str(folder)], check=True)
    try:
        r = sandbox.run("--vllm-version", "0.16")
    finally:
        subprocess.run(["chattr", "-i", str(folder)], check=True)
    assert r.returncode == 2
    assert r.stderr.splitlines()[-1] == (f"patch-speculators: error: cannot write {folder.resolve()}/custom_worker.py "
                                         f"(read-only): run as the owner of that environment; nothing was changed")
    assert sandbox.snapshot() == before
    assert json.loads(sandbox.run("status", "--json").stdout)["state"] == "original"


@pytest.mark.slow
def test_a_package_folder_replaced_by_a_file_is_drift_not_a_traceback(sandbox: Sandbox, tmp_path: Path) -> None:
    assert sandbox.run("--vllm-version", "0.16").returncode == 0
    folder = sandbox.site / "speculators" / "data_generation"
    folder.rename(tmp_path / "moved")
    folder.write_text("not a folder\n")
    r = sandbox.run("status")
    assert (r.returncode, r.stderr) == (0, "")
    assert r.stdout.startswith("drifted: ")

"""The overlay in-process: git through `Overlay`, the lock, the on-disk layout (no venv needed)."""

from __future__ import annotations

import hashlib

import os
from pathlib import Path

import pytest
from conftest import write_tree

from vllm_shim_patch.errors import LockedError, OverlayError
from vllm_shim_patch.fsutil import record_hash
from vllm_shim_patch.overlay.layout import overlay_path, read_journal, read_state, tracked_paths
from vllm_shim_patch.overlay.lock import hold, holder
from vllm_shim_patch.overlay.repo import Overlay

ORIGINAL = {"pkg/__init__.py": b"", "pkg/mod.py": b"X(a, eos=1)\r\n"}


@pytest.fixture
def work(tmp_path: Path) -> Path:
    return write_tree(tmp_path / "site", ORIGINAL)


@pytest.fixture
def ov(tmp_path: Path, work: Path) -> Overlay:
    overlay = Overlay(tmp_path / "state" / "pkg-0123456789ab", work)
    overlay.create(sorted(ORIGINAL), "original\n")
    return overlay


# -- Overlay ------------------------------------------------------------------------------------


def test_create_commits_the_files_as_they_are_and_tags_original(ov: Overlay) -> None:
    head = ov.head_commit()
    assert head is not None and len(head) == 40
    assert ov.exists() and ov.gitdir == ov.path / "git"
    assert ov.resolve("original") == head == ov.tag_points_at("original")
    assert ov.tree_files(head, [*ORIGINAL, "pkg/missing.py"]) == {**ORIGINAL, "pkg/missing.py": None}
    assert ov.git("log", "-1", "--format=%B", head) == "original\n\n"
    assert ov.git("config", "core.autocrlf") == "false\n"
    assert not list(ov.path.glob("git.partial-*"))


def test_head_commit_is_none_before_create(tmp_path: Path, work: Path) -> None:
    overlay = Overlay(tmp_path / "nothing", work)
    assert (overlay.exists(), overlay.head_commit(), overlay.state(), overlay.journal()) == (
        False, None, None, None,
    )


def test_tree_files_of_no_paths_runs_no_git(tmp_path: Path, work: Path) -> None:
    assert Overlay(tmp_path / "nothing", work).tree_files("HEAD", []) == {}


def test_commit_records_changes_and_deletions_and_moves_a_tag(ov: Overlay, work: Path) -> None:
    original = ov.resolve("original")
    (work / "pkg/mod.py").write_bytes(b"X(a)\r\n")
    (work / "pkg/__init__.py").unlink()
    patched = ov.commit(sorted(ORIGINAL), "patch\n", tag="patched")
    assert patched == ov.head_commit() == ov.tag_points_at("patched") != original
    assert ov.tree_files(patched, sorted(ORIGINAL)) == {"pkg/__init__.py": None, "pkg/mod.py": b"X(a)\r\n"}
    assert ov.tree_files(original, sorted(ORIGINAL)) == ORIGINAL
    assert ov.tag_points_at("no-such-tag") is None
    # A path neither on disk nor in the index any more is not listed again (git add would fail).
    again = ov.commit(["pkg/mod.py"], "nothing changed\n", allow_empty=True)
    assert ov.git("rev-parse", f"{again}^").strip() == patched


def test_commit_without_changes_fails_with_git_words(ov: Overlay) -> None:
    with pytest.raises(OverlayError) as info:
        ov.commit(sorted(ORIGINAL), "nothing\n")
    assert str(info.value).startswith(f"git commit failed in the overlay {ov.path}: ")
    assert str(info.value).endswith(" (if the overlay is damaged, move it away and run again)")


def test_resolve_unknown_state(ov: Overlay) -> None:
    with pytest.raises(OverlayError) as info:
        ov.resolve("nope")
    assert str(info.value) == "no state 'nope' in the overlay (see `patch-speculators log`)"


def test_commit_tree_replaces_files_without_touching_the_work_tree(ov: Overlay, work: Path) -> None:
    original = ov.resolve("original")
    commit = ov.commit_tree(original, {"pkg/mod.py": b"edited\n"}, "edits\n", tag="original")
    assert ov.resolve("original") == commit == ov.head_commit()
    assert ov.tree_files(commit, sorted(ORIGINAL)) == {**ORIGINAL, "pkg/mod.py": b"edited\n"}
    assert (work / "pkg/mod.py").read_bytes() == ORIGINAL["pkg/mod.py"]
    assert not (ov.path / "index.partial").exists() and not (ov.path / "blob.partial").exists()


def test_write_files_journals_then_writes_and_restore_undoes(ov: Overlay, work: Path) -> None:
    base = ov.resolve("original")
    ov.write_files("apply", {"pkg/mod.py": b"X(a)\r\n"}, base, package="pkg 1.0")
    assert (work / "pkg/mod.py").read_bytes() == b"X(a)\r\n"
    journal = ov.journal()
    assert journal is not None
    assert {k: journal[k] for k in ("op", "pid", "base_commit", "files", "package")} == {
        "op": "apply",
        "pid": os.getpid(),
        "base_commit": base,
        "files": {"pkg/mod.py": {"before": record_hash(ORIGINAL["pkg/mod.py"]),
                                 "after": record_hash(b"X(a)\r\n")}},
        "package": "pkg 1.0",
    }
    assert read_journal(ov.path) == journal
    assert ov.restore(base, sorted(ORIGINAL)) == (["pkg/mod.py"], [])
    assert (work / "pkg/mod.py").read_bytes() == ORIGINAL["pkg/mod.py"]
    assert ov.restore(base, sorted(ORIGINAL)) == ([], [])  # nothing differs any more
    ov.clear_journal()
    assert (ov.journal(), ov.journal_file.exists()) == (None, False)
    ov.clear_journal()  # a second clear is harmless


def test_restore_with_expect_leaves_a_file_changed_by_someone_else(ov: Overlay, work: Path) -> None:
    base = ov.resolve("original")
    ov.write_files("apply", {"pkg/mod.py": b"ours\n", "pkg/__init__.py": b"ours too\n"}, base)
    (work / "pkg/mod.py").write_bytes(b"theirs\n")
    expect = {p: {v["before"], v["after"]} for p, v in ov.journal()["files"].items()}  # type: ignore[index]
    assert ov.restore(base, sorted(ORIGINAL), expect) == (["pkg/__init__.py"], ["pkg/mod.py"])
    assert (work / "pkg/mod.py").read_bytes() == b"theirs\n"
    assert (work / "pkg/__init__.py").read_bytes() == b""


def test_save_state_and_read_state(ov: Overlay) -> None:
    head = ov.head_commit()
    assert head is not None
    ov.save_state(files=["pkg/mod.py"], head={"pkg/mod.py": "h"}, original={"pkg/mod.py": None}, head_commit=head,
                  original_commit=head, trailers={}, package="pkg", version="1.0")
    state = read_state(ov.path)
    assert state == ov.state()
    assert state is not None
    assert (state.files, state.head, state.original) == (["pkg/mod.py"], {"pkg/mod.py": "h"}, {"pkg/mod.py": None})
    assert state.data["format"] == 1


def test_reset_index_drops_a_stale_git_lock(ov: Overlay) -> None:
    (ov.gitdir / "index.lock").write_bytes(b"")
    ov.reset_index()
    assert not (ov.gitdir / "index.lock").exists()


# -- lock ---------------------------------------------------------------------------------------


def test_lock_held_twice_names_the_holder(tmp_path: Path) -> None:
    lock = tmp_path / "lock"
    assert holder(lock) is None  # no file yet
    with hold(lock):
        assert holder(lock) == str(os.getpid())
        with pytest.raises(LockedError) as info, hold(lock):
            pass
        assert str(info.value) == (
            f"another patch-speculators (pid {os.getpid()}) is working on this package; "
            "wait for it or run again with --wait"
        )
    assert holder(lock) is None
    with hold(lock):  # free again
        pass


def test_overlay_locked_creates_its_folder(tmp_path: Path, work: Path) -> None:
    overlay = Overlay(tmp_path / "fresh", work)
    with overlay.locked():
        assert holder(overlay.lock_file) == str(os.getpid())
    assert overlay.lock_file == tmp_path / "fresh" / "lock"


# -- layout -------------------------------------------------------------------------------------


def test_overlay_path_is_stable_per_location(tmp_path: Path) -> None:
    a = overlay_path(tmp_path, "Spec_Ulators", Path("/venv/a/site-packages"))
    assert a == overlay_path(tmp_path, "Spec_Ulators", Path("/venv/a/site-packages"))
    assert a != overlay_path(tmp_path, "Spec_Ulators", Path("/venv/b/site-packages"))
    assert a.parent == tmp_path
    # The first 12 hex digits of the sha256 of the location's bytes (the same folder in any locale).
    assert a.name == "spec-ulators-" + hashlib.sha256(b"/venv/a/site-packages").hexdigest()[:12]


def test_tracked_paths_drops_bytecode_and_outside_paths() -> None:
    assert tracked_paths([
        "pkg/mod.py",
        "pkg/__pycache__/mod.cpython-311.pyc",
        "pkg/old.pyc",
        "../../../bin/tool",
        "/etc/pkg.conf",
        "pkg-1.0.dist-info/RECORD",
        "pkg/__init__.py",
    ]) == ["pkg-1.0.dist-info/RECORD", "pkg/__init__.py", "pkg/mod.py"]


def test_read_state_and_journal_of_an_empty_folder(tmp_path: Path) -> None:
    assert (read_state(tmp_path), read_journal(tmp_path)) == (None, None)

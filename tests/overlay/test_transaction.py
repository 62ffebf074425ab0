"""The overlay transaction in-process, on a tiny fake installed package (no venv, no pip): its
steps in order, what each leaves on disk, and a run cut short finished or undone by the next."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import write_tree

from vllm_shim_patch.errors import LockedError, OverlayError
from vllm_shim_patch.fsutil import record_hash
from vllm_shim_patch.overlay.baseline import read_trailers
from vllm_shim_patch.overlay.repo import Overlay
from vllm_shim_patch.overlay.transaction import Transaction
from vllm_shim_patch.target import RecordEntry, Target

FILES = {
    "pkg/__init__.py": b"",
    "pkg/mod.py": b"from m import X\r\nX(a, eos=1)\r\n",
    "pkg-1.0.dist-info/METADATA": b"Name: pkg\nVersion: 1.0\n",
}
TRACKED = ["pkg-1.0.dist-info/METADATA", "pkg/__init__.py", "pkg/mod.py"]
PATCHED = b"from m import X\r\nX(a)\r\n"


def _target(site: Path) -> Target:
    record = [RecordEntry(p, record_hash(d), len(d)) for p, d in FILES.items()]
    return Target(python="/fake/bin/python", python_version="3.11.0", package="pkg", version="1.0",
                  location=site, record=tuple(record), editable=None, vllm_version=None, vllm_location=None)


@pytest.fixture
def site(tmp_path: Path) -> Path:
    return write_tree(tmp_path / "site-packages", FILES)


@pytest.fixture
def ov(tmp_path: Path, site: Path) -> Overlay:
    return Overlay(tmp_path / "state" / "pkg-0123456789ab", site, allowed=TRACKED)


def _patch(ov: Overlay, site: Path, log: list[str]) -> str:
    with Transaction.begin(ov, _target(site), TRACKED, log.append) as txn:
        txn.record_original(accept_modified=False, index=False)
        txn.write("apply", {"pkg/mod.py": PATCHED})
        return txn.commit(txn.message("patch", "patch pkg 1.0", [], {"Package": "pkg 1.0"}), tag="patched")


def test_the_steps_record_the_original_write_and_commit(ov: Overlay, site: Path) -> None:
    log: list[str] = []
    commit = _patch(ov, site, log)
    assert log == [f"recorded the original pkg 1.0 in the overlay {ov.path}"]
    assert (site / "pkg/mod.py").read_bytes() == PATCHED
    assert ov.journal() is None
    assert ov.head_commit() == commit == ov.tag_points_at("patched")
    assert ov.tree_files(ov.resolve("original"), ["pkg/mod.py"]) == {"pkg/mod.py": FILES["pkg/mod.py"]}
    assert {k: v for k, v in read_trailers(ov, commit).items() if k != "tool"} == {"kind": "patch", "package": "pkg 1.0"}
    state = ov.state()
    assert state is not None
    assert (state.head["pkg/mod.py"], state.data["head_commit"]) == (record_hash(PATCHED), commit)
    assert (ov.path / "lock").read_text() == str(os.getpid())  # the last holder
    with Transaction.begin(Overlay(ov.path, site), _target(site), TRACKED, log.append):
        pass  # the lock released: the next transaction begins at once (a held one refuses: below)


def test_write_journals_first_and_restore_puts_the_files_back(ov: Overlay, site: Path) -> None:
    with Transaction.begin(ov, _target(site), TRACKED, lambda _: None) as txn:
        txn.record_original(accept_modified=False, index=False)
        head = ov.head_commit()
        txn.write("apply", {"pkg/mod.py": PATCHED})
        journal = ov.journal()
        assert journal is not None
        assert {k: journal[k] for k in ("op", "base_commit", "files", "package")} == {
            "op": "apply", "base_commit": head, "package": "pkg 1.0",
            "files": {"pkg/mod.py": {"before": record_hash(FILES["pkg/mod.py"]), "after": record_hash(PATCHED)}}}
        assert txn.restore() == ["pkg/mod.py"]
        assert (site / "pkg/mod.py").read_bytes() == FILES["pkg/mod.py"]
        assert ov.journal() is None
        assert txn.restore() == []  # nothing differs any more
    assert ov.head_commit() == head


def test_restore_before_any_write_restores_nothing(ov: Overlay, site: Path) -> None:
    with Transaction.begin(ov, _target(site), TRACKED, lambda _: None) as txn:
        txn.record_original(accept_modified=False, index=False)
        assert txn.restore() == []
    assert (site / "pkg/mod.py").read_bytes() == FILES["pkg/mod.py"]


def test_a_write_never_committed_is_undone_by_the_next_begin(ov: Overlay, site: Path) -> None:
    with Transaction.begin(ov, _target(site), TRACKED, lambda _: None) as txn:
        txn.record_original(accept_modified=False, index=False)
        txn.write("apply", {"pkg/mod.py": PATCHED})  # then the run ends, as a killed one would
    assert ov.journal() is not None
    log: list[str] = []
    with Transaction.begin(ov, _target(site), TRACKED, log.append):
        assert (site / "pkg/mod.py").read_bytes() == FILES["pkg/mod.py"]
        assert ov.journal() is None
    assert log == [f"undid an interrupted apply (pid {os.getpid()}): restored 1 of 1 files"]


def test_begin_holds_the_lock_for_its_body(ov: Overlay, site: Path) -> None:
    target = _target(site)
    with Transaction.begin(ov, target, TRACKED, lambda _: None):
        with pytest.raises(LockedError) as info:
            with Transaction.begin(Overlay(ov.path, site), target, TRACKED, lambda _: None):
                pass
    assert str(info.value) == (f"another patch-speculators (pid {os.getpid()}) is working on this package; "
                               f"wait for it or run again with --wait")


def test_a_failed_write_is_settled_at_once(ov: Overlay, site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A write failing part-way (the second file: a full disk) is undone before `begin` ends,
    and said in one line."""
    from vllm_shim_patch.overlay import repo

    real = repo.atomic_write

    def full(path: Path, data: bytes, mode: int | None = None) -> None:
        if path.name == "mod.py":
            raise OSError(28, "No space left on device", str(path))
        real(path, data, mode)

    with Transaction.begin(ov, _target(site), TRACKED, lambda _: None) as txn:
        txn.record_original(accept_modified=False, index=False)
    monkeypatch.setattr(repo, "atomic_write", full)
    with pytest.raises(OverlayError) as info:
        with Transaction.begin(ov, _target(site), TRACKED, lambda _: None) as txn:
            txn.write("apply", {"pkg/__init__.py": b"# patched\n", "pkg/mod.py": PATCHED})
    assert str(info.value) == (f"cannot write {site / 'pkg/mod.py'}: No space left on device; the files were "
                               f"restored: nothing was changed")
    assert {p: (site / p).read_bytes() for p in FILES} == FILES
    assert ov.journal() is None


def test_rollback_steps_save_edits_made_outside_and_refuse_an_unknown_state(ov: Overlay, site: Path) -> None:
    _patch(ov, site, [])
    (site / "pkg/mod.py").write_bytes(b"edited by hand\n")
    with Transaction.begin(ov, _target(site), TRACKED, lambda _: None) as txn:
        saved = txn.settle_for_rollback()
        assert saved is not None and saved[0] == 1 and saved[1] == ov.head_commit()
        assert read_trailers(ov, saved[1])["kind"] == "drift"
        original = txn.resolve("original")
        assert txn.changes_to(original, original=True) == {"pkg/mod.py": FILES["pkg/mod.py"]}
        with pytest.raises(OverlayError) as info:
            txn.resolve("nothing-here")
    assert str(info.value) == "no state 'nothing-here' in the overlay (see `patch-speculators log`)"


FILES_2 = {"pkg/__init__.py": b"", "pkg/mod.py": b"from m import X\r\nX(a, eos=2)\r\n",
           "pkg-2.0.dist-info/METADATA": b"Name: pkg\nVersion: 2.0\n"}
TRACKED_2 = ["pkg-2.0.dist-info/METADATA", "pkg/__init__.py", "pkg/mod.py"]


def _release_2(site: Path) -> Target:
    """pkg 2.0 installed over the patched 1.0, as pip leaves it (RECORD-exact)."""
    (site / "pkg-1.0.dist-info/METADATA").unlink()
    write_tree(site, FILES_2)
    record = [RecordEntry(p, record_hash(d), len(d)) for p, d in FILES_2.items()]
    return Target(python="/fake/bin/python", python_version="3.11.0", package="pkg", version="2.0",
                  location=site, record=tuple(record), editable=None, vllm_version=None, vllm_location=None)


def _files(site: Path) -> dict[str, bytes]:
    return {p.relative_to(site).as_posix(): p.read_bytes() for p in site.rglob("*") if p.is_file()}


def test_a_state_of_another_release_is_refused_by_name(ov: Overlay, site: Path) -> None:
    """Once 2.0 is installed, 1.0's states are not a rollback target: `resolve` refuses them,
    naming both releases, and resolves 2.0's own original (pip's bytes, the new baseline)."""
    patched = _patch(ov, site, [])
    target = _release_2(site)
    with Transaction.begin(Overlay(ov.path, site, allowed=TRACKED_2), target, TRACKED_2, lambda _: None) as txn:
        assert txn.settle_for_rollback() is None  # 2.0 as pip wrote it: its own original
        before = (_files(site), ov.head_commit())
        for label in ("patched", patched):
            with pytest.raises(OverlayError) as info:
                txn.resolve(label)
            assert str(info.value) == (f"{label} is a state of pkg 1.0, but pkg 2.0 is installed: roll back within "
                                       f"the installed version, or reinstall pkg 1.0 first")
        assert (_files(site), ov.head_commit()) == before
        original = txn.resolve("original")
        assert read_trailers(ov, original)["package"] == "pkg 2.0"
        assert txn.changes_to(original, original=True) == {}


def test_another_release_edited_by_hand_is_refused_before_the_baseline(ov: Overlay, site: Path) -> None:
    """2.0 installed, then edited: the overlay holds no original of 2.0 and never writes 1.0's, so
    `settle_for_rollback` refuses, naming the edited file, and nothing is written or recorded."""
    _patch(ov, site, [])
    target = _release_2(site)
    (site / "pkg/mod.py").write_bytes(b"edited by hand\n")
    before = (_files(site), ov.head_commit())
    with pytest.raises(OverlayError) as info:
        with Transaction.begin(Overlay(ov.path, site, allowed=TRACKED_2), target, TRACKED_2, lambda _: None) as txn:
            txn.settle_for_rollback()
    assert str(info.value) == (
        "pkg 2.0 is installed where the overlay recorded pkg 1.0, and 1 file of pkg 2.0 differs from its RECORD: "
        "pkg/mod.py; the overlay holds no original of pkg 2.0, so nothing was written: reinstall it (pip install "
        "--force-reinstall --no-deps pkg==2.0) and run again; rollback never writes another release's files")
    assert (_files(site), ov.head_commit()) == before

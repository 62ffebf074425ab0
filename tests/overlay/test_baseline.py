"""The baseline and recovery in-process, on a tiny fake installed package (no venv, no pip)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import write_tree

from vllm_shim_patch.errors import OverlayError
from vllm_shim_patch.fsutil import record_hash
from vllm_shim_patch.overlay.baseline import original_bytes, prepare, read_trailers
from vllm_shim_patch.overlay.recovery import recover
from vllm_shim_patch.overlay.repo import Overlay
from vllm_shim_patch.target import RecordEntry, Target

FILES = {
    "pkg/__init__.py": b"",
    "pkg/mod.py": b"from m import X\r\nX(a, eos=1)\r\n",
    "pkg-1.0.dist-info/METADATA": b"Name: pkg\nVersion: 1.0\n",
}
TRACKED = ["pkg-1.0.dist-info/METADATA", "pkg/__init__.py", "pkg/mod.py"]


def _target(site: Path) -> Target:
    record = [RecordEntry(p, record_hash(d), len(d)) for p, d in FILES.items()]
    record += [
        RecordEntry("pkg/__pycache__/mod.cpython-311.pyc", None, None),
        RecordEntry("../../bin/pkg-tool", record_hash(b"#!"), 2),
        RecordEntry("pkg-1.0.dist-info/RECORD", None, None),
    ]
    return Target(
        python="/fake/bin/python", python_version="3.11.0", package="pkg", version="1.0",
        location=site, record=tuple(record), editable=None,
        vllm_version=None, vllm_location=None,
    )


@pytest.fixture
def site(tmp_path: Path) -> Path:
    root = write_tree(tmp_path / "site-packages", FILES)
    (root / "pkg-1.0.dist-info/RECORD").write_bytes(b"(not read: the fake Target carries RECORD)\n")
    return root


@pytest.fixture
def ov(tmp_path: Path, site: Path) -> Overlay:
    return Overlay(tmp_path / "state" / "pkg-0123456789ab", site)


def test_prepare_records_a_record_verified_original(ov: Overlay, site: Path) -> None:
    log: list[str] = []
    target = _target(site)
    files = prepare(ov, target, False, log.append)
    assert files == sorted([*TRACKED, "pkg-1.0.dist-info/RECORD"])  # no bytecode, nothing outside
    assert log == [f"recorded the original pkg 1.0 in the overlay {ov.path}"]
    assert prepare(ov, target, False, log.append) == files  # HEAD is what is installed: nothing to do
    assert len(log) == 1
    original = ov.resolve("original")
    assert original == ov.head_commit()
    assert ov.tree_files(original, TRACKED) == {p: FILES[p] for p in TRACKED}
    assert ov.git("log", "--format=%s", original).splitlines() == [
        "original: pkg 1.0 as installed (RECORD verified)"
    ]
    trailers = read_trailers(ov, original)
    assert {k: trailers[k] for k in ("kind", "package", "record")} == {
        "kind": "baseline", "package": "pkg 1.0", "record": "verified",
    }
    state = ov.state()
    assert state is not None
    assert (state.data["package"], state.data["version"], state.data["location"]) == ("pkg", "1.0", str(site))
    assert state.original["pkg/mod.py"] == state.head["pkg/mod.py"] == record_hash(FILES["pkg/mod.py"])


def test_prepare_refuses_a_modified_file_without_accept_modified(ov: Overlay, site: Path) -> None:
    (site / "pkg/mod.py").write_bytes(b"edited\n")
    with pytest.raises(OverlayError) as info:
        prepare(ov, _target(site), False, lambda _: None)
    assert str(info.value) == (
        "1 file of pkg 1.0 differs from its RECORD (edited by hand already?): pkg/mod.py; run again with "
        "--accept-modified to take them as the original, or reinstall with "
        "pip install --force-reinstall --no-deps pkg==1.0"
    )
    assert not ov.exists()


def test_prepare_accepts_a_modified_file_when_told(ov: Overlay, site: Path) -> None:
    (site / "pkg/mod.py").write_bytes(b"edited\n")
    prepare(ov, _target(site), True, lambda _: None)
    original = ov.resolve("original")
    assert ov.tree_files(original, ["pkg/mod.py"]) == {"pkg/mod.py": b"edited\n"}
    assert ov.git("log", "--format=%s", original).splitlines() == [
        "original: pkg 1.0 as installed (accepted as modified: 1 file differs from RECORD)"
    ]
    assert read_trailers(ov, original)["record"] == "modified: pkg/mod.py"


def test_original_bytes_reads_git_when_the_file_changed(ov: Overlay, site: Path) -> None:
    target = _target(site)
    assert original_bytes(None, target, ["pkg/mod.py"]) == {"pkg/mod.py": FILES["pkg/mod.py"]}
    prepare(ov, target, False, lambda _: None)
    (site / "pkg/mod.py").write_bytes(b"from m import X\r\nX(a)\r\n")  # as a patch would leave it
    (site / "pkg/__init__.py").unlink()
    assert original_bytes(ov, target, ["pkg/mod.py", "pkg/__init__.py", "pkg/never.py"]) == {
        "pkg/mod.py": FILES["pkg/mod.py"],
        "pkg/__init__.py": b"",
    }
    other = Target(**{**vars(target), "version": "2.0"})  # the overlay describes another install
    assert original_bytes(ov, other, ["pkg/mod.py"]) == {"pkg/mod.py": b"from m import X\r\nX(a)\r\n"}


def test_recover_undoes_an_interrupted_apply(ov: Overlay, site: Path) -> None:
    target = _target(site)
    files = prepare(ov, target, False, lambda _: None)
    base = ov.head_commit()
    assert base is not None
    # A run killed after writing its files, before its commit: the journal is all that is left.
    ov.write_files("apply", {"pkg/mod.py": b"from m import X\r\nX(a)\r\n"}, base, package="pkg 1.0")
    log: list[str] = []
    recover(ov, target, files, log.append)
    assert log == [f"undid an interrupted apply (pid {os.getpid()}): restored 1 of 1 files"]
    assert (site / "pkg/mod.py").read_bytes() == FILES["pkg/mod.py"]
    assert ov.journal() is None
    assert ov.head_commit() == base


def test_recover_leaves_a_file_changed_since_the_killed_apply(ov: Overlay, site: Path) -> None:
    target = _target(site)
    files = prepare(ov, target, False, lambda _: None)
    base = ov.head_commit()
    assert base is not None
    ov.write_files("apply", {"pkg/mod.py": b"ours\n", "pkg/__init__.py": b"ours\n"}, base)
    (site / "pkg/mod.py").write_bytes(b"theirs\n")
    log: list[str] = []
    recover(ov, target, files, log.append)
    assert log == [
        f"undid an interrupted apply (pid {os.getpid()}): restored 1 of 2 files",
        "left as found, changed since the interrupted run: pkg/mod.py",
    ]
    assert ((site / "pkg/mod.py").read_bytes(), (site / "pkg/__init__.py").read_bytes()) == (b"theirs\n", b"")
    assert ov.journal() is None


def test_recover_without_an_overlay_or_journal_does_nothing(ov: Overlay, site: Path) -> None:
    log: list[str] = []
    recover(ov, _target(site), [], log.append)
    assert (log, ov.exists()) == ([], False)
    files = prepare(ov, _target(site), False, lambda _: None)
    recover(ov, _target(site), files, log.append)
    assert log == []


def test_prepare_records_pristine_original_and_local_edits(ov: Overlay, site: Path) -> None:
    from vllm_shim_patch.overlay.pristine import Pristine

    (site / "pkg/mod.py").write_bytes(b"edited\n")
    log: list[str] = []
    asked: list[list[str]] = []

    def find(paths: list[str]) -> Pristine:
        asked.append(paths)
        return Pristine("--wheel pkg-1.0-py3-none-any.whl", {"pkg/mod.py": FILES["pkg/mod.py"]})

    target = _target(site)
    prepare(ov, target, False, log.append, pristine=find)
    assert asked == [["pkg/mod.py"]]
    assert ov.tree_files(ov.resolve("original"), ["pkg/mod.py"]) == {"pkg/mod.py": FILES["pkg/mod.py"]}
    assert ov.tree_files(ov.resolve("local"), ["pkg/mod.py"]) == {"pkg/mod.py": b"edited\n"}
    assert ov.git("log", "--format=%s").splitlines() == [
        "local: hand edits to pkg 1.0, not by this tool (pkg/mod.py)",
        "original: pkg 1.0 as released (RECORD verified; 1 hand-edited file from --wheel pkg-1.0-py3-none-any.whl)",
    ]
    assert (site / "pkg/mod.py").read_bytes() == b"edited\n"  # the work tree untouched
    state = ov.state()
    assert state is not None and state.data["local_files"] == ["pkg/mod.py"]
    # The rules plan from the hand edits, installed or only in git (a patched file on disk).
    assert original_bytes(ov, target, ["pkg/mod.py"]) == {"pkg/mod.py": b"edited\n"}
    (site / "pkg/mod.py").write_bytes(b"patched\n")
    assert original_bytes(ov, target, ["pkg/mod.py"]) == {"pkg/mod.py": b"edited\n"}
    # After a rollback to the pristine original, that is what is planned from.
    (site / "pkg/mod.py").write_bytes(FILES["pkg/mod.py"])
    assert original_bytes(ov, target, ["pkg/mod.py"]) == {"pkg/mod.py": FILES["pkg/mod.py"]}

"""An installation from a patched wheel, recognised, checked for drift, its original rebuilt."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest
from fixture import PATCHED, WORKER, original_files
from test_build import facts

from vllm_shim_patch.errors import TargetError
from vllm_shim_patch.fleet import build, installed, record
from vllm_shim_patch.fsutil import record_hash
from vllm_shim_patch.target import RecordEntry, Target


def install(site: Path, wheel: bytes) -> Target:
    """What an installer does that matters here: the members unpacked, RECORD rewritten with its
    own INSTALLER file listed."""
    with zipfile.ZipFile(io.BytesIO(wheel)) as zf:
        zf.extractall(site)
        names = zf.namelist()
    dist_info = next(n.split("/", 1)[0] for n in names if n.endswith(".dist-info/RECORD"))
    (site / dist_info / "INSTALLER").write_bytes(b"pip\n")
    rows = [r for r in record.read((site / dist_info / "RECORD").read_bytes()) if not r.path.endswith("/RECORD")]
    listed = [(r.path, (site / r.path).read_bytes()) for r in rows] + [(f"{dist_info}/INSTALLER", b"pip\n")]
    (site / dist_info / "RECORD").write_bytes(record.write(listed, f"{dist_info}/RECORD"))
    entries = tuple(RecordEntry(r.path, r.hash or None, int(r.size) if r.size else None)
                    for r in record.read((site / dist_info / "RECORD").read_bytes()))
    version = dist_info.removesuffix(".dist-info").split("-", 1)[1]
    return Target("python", "3.11", "speculators", version, site, entries, None, None, None)


@pytest.fixture
def wheel() -> build.Built:
    return build.build(original_files(), PATCHED, facts())


def test_recognised_and_clean(tmp_path: Path, wheel: build.Built) -> None:
    target = install(tmp_path, wheel.data)
    found = installed.find(target)
    assert found is not None
    assert found.label == "speculators 0.4.0+vsp.vllm0.33"
    assert found.provenance == wheel.provenance
    assert found.drift(target) == []
    assert (tmp_path / WORKER).read_bytes() == PATCHED[WORKER]
    assert found.originals(target) == {WORKER: original_files()[WORKER]}
    assert found.original_files(target) == original_files()


@pytest.mark.parametrize(("installed_vllm", "holds"), [("0.33.0", True), ("0.33.1.dev4+gabc", True),
                                                       ("0.32.0", False), ("0.34.0", False)])
def test_holds_the_series(tmp_path: Path, wheel: build.Built, installed_vllm: str, holds: bool) -> None:
    found = installed.find(install(tmp_path, wheel.data))
    assert found is not None and found.holds(installed_vllm) is holds


def test_a_hand_edit_is_drift_and_blocks_the_rebuild(tmp_path: Path, wheel: build.Built) -> None:
    target = install(tmp_path, wheel.data)
    found = installed.find(target)
    assert found is not None
    (tmp_path / "speculators/__init__.py").write_bytes(b"# edited\n")
    (tmp_path / WORKER).unlink()
    assert found.drift(target) == ["speculators/__init__.py", WORKER]
    with pytest.raises(TargetError, match=r"^speculators/__init__.py no longer holds the bytes speculators 0.4.0 was "
                                          r"released with \(edited after the install\?\)$"):
        found.original_files(target)


def test_a_damaged_copy_of_an_original_is_refused(tmp_path: Path, wheel: build.Built) -> None:
    target = install(tmp_path, wheel.data)
    found = installed.find(target)
    assert found is not None
    copy = tmp_path / found.dist_info / "vsp" / "original" / f"{WORKER}.orig"
    copy.write_bytes(b"other\n")
    with pytest.raises(TargetError, match=r"does not hold the bytes the wheel recorded: reinstall the wheel$"):
        found.originals(target)


def test_other_installs_are_not_patched_wheels(tmp_path: Path) -> None:
    files = original_files()
    assert installed.find(install(tmp_path, _zip(files))) is None


def test_a_damaged_patch_file_is_an_error(tmp_path: Path, wheel: build.Built) -> None:
    target = install(tmp_path, wheel.data)
    found = installed.find(target)
    assert found is not None
    (tmp_path / found.dist_info / "vsp" / "patch.json").write_bytes(b"{}")
    with pytest.raises(TargetError, match=r"patch.json is damaged or of another tool's version \(format None"):
        installed.find(target)
    assert record_hash(b"{}") not in {e.hash for e in target.record}


def _zip(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return buffer.getvalue()

"""Issue 11: a real full disk (a small tmpfs) under site-packages or the state dir, in apply and rollback.

The checkpoint-by-checkpoint sweep with injected ENOSPC is in test_crash.py; here the kernel says no.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import GENERATOR, Sandbox

from vllm_shim_patch.fsutil import record_hash

# Every test here runs the CLI on a sandbox venv with the real speculators wheel.
pytestmark = pytest.mark.slow


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "tmpfs"
    mount.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], capture_output=True, text=True,
                       check=False)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {r.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


def fill(mount: Path, leave: int) -> Path:
    """Fill the tmpfs but `leave` bytes."""
    filler = mount / "filler"
    avail = shutil.disk_usage(mount).free
    subprocess.run(["fallocate", "-l", str(avail - leave), str(filler)], check=True)
    return filler


def _error_line(r: subprocess.CompletedProcess[str]) -> str:
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    (line,) = [x for x in r.stderr.splitlines() if x.startswith("patch-speculators: error: ")]
    return line


def pristine(sb: Sandbox) -> bool:
    return all(record_hash((sb.site / p).read_bytes()) == d for p, d in sb.record().items())


def on_tmpfs(sandbox: Sandbox, mount: Path) -> Sandbox:
    shutil.copytree(sandbox.root, mount / "venv", symlinks=True)
    site = next((mount / "venv").glob("lib/python3*/site-packages"))
    return Sandbox(mount / "venv", mount / "venv" / "bin" / "python", site, sandbox.state)


def test_site_packages_full_during_rollback(sandbox: Sandbox, tmpfs: Path) -> None:
    sb = on_tmpfs(sandbox, tmpfs)
    original = sb.snapshot()
    assert sb.run("--vllm-version", "0.16").returncode == 0
    filler = fill(tmpfs, 4096)
    line = _error_line(sb.run("rollback"))
    assert line.startswith(f"patch-speculators: error: cannot write {sb.site}/speculators/data_generation/"), line
    assert line.endswith(": No space left on device; the rollback is cut short and journaled: the next apply or "
                         "rollback finishes or undoes it (free space first)"), line
    assert json.loads(sb.run("status", "--json").stdout)["state"] == "interrupted"
    filler.unlink()
    r = sb.run("rollback")
    assert r.returncode == 0, r.stderr
    assert "finished an interrupted rollback" in r.stderr
    assert sb.snapshot() == original and pristine(sb)


def test_site_packages_full_during_apply(sandbox: Sandbox, tmpfs: Path) -> None:
    sb = on_tmpfs(sandbox, tmpfs)
    original = sb.snapshot()
    for pyc in sb.site.glob("speculators/**/__pycache__/*.pyc"):
        pyc.unlink()  # removing stale bytecode must not free the space the test takes away
    filler = fill(tmpfs, 4096)
    line = _error_line(sb.run("--vllm-version", "0.16"))
    assert line.startswith(f"patch-speculators: error: cannot write {sb.site}/speculators/data_generation/"), line
    assert "No space left on device" in line
    state = json.loads(sb.run("status", "--json").stdout)["state"]
    if line.endswith("the files were restored: nothing was changed"):
        assert sb.snapshot() == original and state == "original"
    else:
        assert line.endswith("the next apply or rollback finishes or undoes it (free space first)"), line
        assert state == "interrupted"
    filler.unlink()
    assert sb.run("--vllm-version", "0.16").returncode == 0
    assert b"kv_cache_specs=" not in (sb.site / GENERATOR).read_bytes()
    assert sb.run("rollback").returncode == 0
    assert sb.snapshot() == original and pristine(sb)


@pytest.mark.parametrize("leave", [0, 12288], ids=["full", "nearly-full"])
@pytest.mark.parametrize("op", ["apply", "rollback"])
def test_state_dir_full(sandbox: Sandbox, tmpfs: Path, op: str, leave: int) -> None:
    sandbox.state = tmpfs / "state"
    original = sandbox.snapshot()
    assert sandbox.run("--vllm-version", "0.16").returncode == 0
    patched = sandbox.snapshot()
    if op == "apply":
        assert sandbox.run("rollback").returncode == 0
    filler = fill(tmpfs, leave)
    r = sandbox.run("--vllm-version", "0.16") if op == "apply" else sandbox.run("rollback")
    line = _error_line(r)
    # Our own write says ENOSPC; git says it in its words, and we say what it means.
    assert "No space left on device" in line or "(the state dir's disk is full: free space and run again)" in line, line
    assert "nothing written" not in line
    journaled = line.endswith("the next apply or rollback finishes or undoes it (free space first)")
    if not journaled:
        assert line.endswith(("the installed files were not changed", "the files were restored: nothing was changed",
                              "(the state dir's disk is full: free space and run again)")), line
        assert sandbox.snapshot() == (original if op == "apply" else patched)
    filler.unlink()
    again = sandbox.run("--vllm-version", "0.16") if op == "apply" else sandbox.run("rollback")
    assert again.returncode == 0, again.stderr
    assert sandbox.snapshot() == (patched if op == "apply" else original)
    assert sandbox.run("rollback").returncode == 0
    assert sandbox.snapshot() == original and pristine(sandbox)


@pytest.mark.parametrize("command", [["--vllm-version", "0.16"], ["rollback"]], ids=" ".join)
def test_read_only_site_packages_writes_nothing(sandbox: Sandbox, tmpfs: Path, command: list[str]) -> None:
    sb = on_tmpfs(sandbox, tmpfs)
    if command == ["rollback"]:
        assert sb.run("--vllm-version", "0.16").returncode == 0
    before = sb.snapshot()
    state = sorted(p.name for p in sb.state.rglob("*")) if sb.state.exists() else None
    subprocess.run(["mount", "-o", "remount,ro", str(tmpfs)], check=True)
    r = sb.run("--json", *command)
    assert (r.returncode, r.stderr) == (2, f"patch-speculators: error: {sb.site} is on a read-only filesystem: patch "
                                           f"speculators where its environment is built (e.g. in the image's "
                                           f"Dockerfile); nothing was changed\n")
    assert json.loads(r.stdout)["kind"] == "TargetError"
    assert sb.snapshot() == before
    # Not even the overlay: the check comes before the lock and the original's record.
    assert (sorted(p.name for p in sb.state.rglob("*")) if sb.state.exists() else None) == state


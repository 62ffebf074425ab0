"""Crash safety: SIGKILL at every checkpoint of apply and rollback, then recover.

The checkpoints are real points in the code (after each git step, each temp write, rename,
journal and state write); VSP_TEST_KILL_AT=N makes the process kill itself at the Nth.
"""

from __future__ import annotations

import json
import shutil
import signal
from pathlib import Path

import pytest
from conftest import GENERATOR, Sandbox

from vllm_shim_patch.fsutil import record_hash

# Every test here runs the CLI on a sandbox venv with the real speculators wheel.
pytestmark = pytest.mark.slow


def trace(sb: Sandbox, *args: str, tmp: Path) -> list[str]:
    out = tmp / "trace.txt"
    r = sb.run(*args, env={"VSP_TEST_TRACE": str(out)})
    assert r.returncode == 0, r.stderr
    names = [line.split(" ", 1)[1] for line in out.read_text().splitlines()]
    out.unlink()
    return names


def pristine(sb: Sandbox) -> bool:
    return all(record_hash((sb.site / p).read_bytes()) == d for p, d in sb.record().items())


def test_apply_and_rollback_have_enough_distinct_kill_points(sandbox: Sandbox, tmp_path: Path) -> None:
    apply_points = trace(sandbox, "--vllm-version", "0.17", tmp=tmp_path)
    rollback_points = trace(sandbox, "rollback", tmp=tmp_path)
    assert len(apply_points) >= 20
    for must in ("git:committed", "apply:journal", "apply:verified", "journal:clearing",
                 "write:renamed vllm_hidden_states_generator.py"):
        assert must in apply_points
    assert "rollback:journal" in rollback_points


def _kill(sb: Sandbox, n: int, *args: str) -> bool:
    r = sb.run(*args, env={"VSP_TEST_KILL_AT": str(n)})
    if r.returncode == -signal.SIGKILL:
        return True
    assert r.returncode == 0, r.stderr
    return False


def fresh(template: Path, where: Path) -> Sandbox:
    shutil.copytree(template, where / "venv", symlinks=True)
    site = next((where / "venv").glob("lib/python3*/site-packages"))
    return Sandbox(where / "venv", where / "venv" / "bin" / "python", site, where / "state")


def test_killed_apply_recovers_at_every_checkpoint(sandbox_template: Path, tmp_path: Path) -> None:
    points = trace(fresh(sandbox_template, tmp_path / "trace"), "--vllm-version", "0.17", tmp=tmp_path)
    assert len(points) >= 20
    for n, point in enumerate(points, 1):
        sb = fresh(sandbox_template, tmp_path / f"kill-{n}")
        original = sb.snapshot()
        assert _kill(sb, n, "--vllm-version", "0.17"), point
        status = json.loads(sb.run("status", "--json").stdout)
        if sb.snapshot() != original:
            # Files were written: the journal says so, or the patch was fully recorded.
            assert status["state"] in ("interrupted", "patched"), (point, status)
        else:
            assert status["state"] in ("interrupted", "original", "not tracked"), (point, status)
        back = sb.run("rollback")
        assert back.returncode == 0, (point, back.stderr)
        assert sb.snapshot() == original, point
        assert pristine(sb), point
        again = sb.run("--vllm-version", "0.17")
        assert again.returncode == 0, (point, again.stderr)
        assert sb.run("--vllm-version", "0.17", "--check").returncode == 0, point
        shutil.rmtree(tmp_path / f"kill-{n}")


def test_killed_rollback_is_finished_at_every_checkpoint(sandbox_template: Path, tmp_path: Path) -> None:
    probe = fresh(sandbox_template, tmp_path / "trace")
    assert probe.run("--vllm-version", "0.17").returncode == 0
    points = trace(probe, "rollback", tmp=tmp_path)
    assert len(points) >= 10
    for n, point in enumerate(points, 1):
        sb = fresh(sandbox_template, tmp_path / f"kill-{n}")
        original = sb.snapshot()
        assert sb.run("--vllm-version", "0.17").returncode == 0
        assert _kill(sb, n, "rollback"), point
        back = sb.run("rollback")
        assert back.returncode == 0, (point, back.stderr)
        assert sb.snapshot() == original, point
        assert pristine(sb), point
        assert sb.run("status").stdout.startswith("original: speculators 0.3.0"), point
        shutil.rmtree(tmp_path / f"kill-{n}")


def test_killed_apply_is_undone_by_the_next_apply(sandbox: Sandbox, tmp_path: Path) -> None:
    trace(sandbox, "--vllm-version", "0.17", tmp=tmp_path)
    assert sandbox.run("rollback").returncode == 0
    # The overlay exists now, so the next apply's checkpoints start at its journal.
    later = trace(sandbox, "--vllm-version", "0.16", tmp=tmp_path)
    assert sandbox.run("rollback").returncode == 0
    n = later.index("write:renamed vllm_hidden_states_generator.py") + 1
    assert _kill(sandbox, n, "--vllm-version", "0.16")
    assert json.loads(sandbox.run("status", "--json").stdout)["state"] == "interrupted"
    r = sandbox.run("--vllm-version", "0.16")
    assert r.returncode == 0, r.stderr
    assert "undid an interrupted apply" in r.stderr
    assert sandbox.run("--vllm-version", "0.16", "--check").returncode == 0


def test_two_concurrent_applies(sandbox: Sandbox, tmp_path: Path) -> None:
    assert sandbox.run("--vllm-version", "0.16").returncode == 0
    assert sandbox.run("rollback").returncode == 0
    points = trace(sandbox, "--vllm-version", "0.16", tmp=tmp_path)
    assert sandbox.run("rollback").returncode == 0
    # Hold the first apply inside its transaction (files journaled, not yet written).
    with sandbox.paused(points.index("apply:journal") + 1, tmp_path / "paused", "--vllm-version", "0.16") as first:
        second = sandbox.run("--vllm-version", "0.16")
        assert second.returncode == 2
        assert second.stderr.strip() == (
            f"patch-speculators: error: another patch-speculators (pid {first.pid}) is working on this "
            "package; wait for it or run again with --wait"
        )
    assert first.returncode == 0
    assert sandbox.run("--vllm-version", "0.16", "--check").returncode == 0
    assert b"kv_cache_specs=" not in (sandbox.site / GENERATOR).read_bytes()


# -- a full disk: the write at the Nth checkpoint fails with ENOSPC -------------------------------


def _enospc(sb: Sandbox, n: int, stays: bool, *args: str) -> tuple[str, bool]:
    """Run with ENOSPC at checkpoint `n` (and after, if the disk `stays` full): (its error line, journaled)."""
    env = {"VSP_TEST_ENOSPC_AT": str(n), **({"VSP_TEST_ENOSPC_STAYS": "1"} if stays else {})}
    r = sb.run(*args, env=env)
    assert r.returncode == 2, (n, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    line = r.stderr.splitlines()[-1]
    assert line.startswith("patch-speculators: error: ") and "No space left on device" in line, line
    return line, line.endswith("the next apply or rollback finishes or undoes it (free space first)")


def test_disk_full_during_apply_at_every_checkpoint(sandbox_template: Path, tmp_path: Path) -> None:
    probe = fresh(sandbox_template, tmp_path / "trace")
    points = trace(probe, "--vllm-version", "0.17", tmp=tmp_path)
    patched = probe.snapshot()
    assert len(points) >= 20
    for n, point in enumerate(points, 1):
        stays = n % 2 == 0  # every other point: the disk stays full, so undoing fails too
        sb = fresh(sandbox_template, tmp_path / f"full-{n}")
        original = sb.snapshot()
        line, journaled = _enospc(sb, n, stays, "--vllm-version", "0.17")
        status = json.loads(sb.run("status", "--json").stdout)
        if journaled:
            assert status["state"] == "interrupted", (point, line)
        elif line.endswith("was finished and recorded after all"):
            assert sb.snapshot() == patched and status["state"] == "patched", (point, line)
        else:
            assert line.endswith(("the installed files were not changed", "nothing was changed")), (point, line)
            assert sb.snapshot() == original, (point, line)
            assert status["state"] in ("original", "not tracked"), (point, status)
        again = sb.run("--vllm-version", "0.17")
        assert again.returncode == 0, (point, again.stderr)
        assert sb.run("--vllm-version", "0.17", "--check").returncode == 0, point
        assert sb.snapshot() == patched, point
        back = sb.run("rollback")
        assert back.returncode == 0, (point, back.stderr)
        assert sb.snapshot() == original and pristine(sb), point
        shutil.rmtree(tmp_path / f"full-{n}")


def test_disk_full_during_rollback_at_every_checkpoint(sandbox_template: Path, tmp_path: Path) -> None:
    probe = fresh(sandbox_template, tmp_path / "trace")
    assert probe.run("--vllm-version", "0.17").returncode == 0
    patched = probe.snapshot()
    points = trace(probe, "rollback", tmp=tmp_path)
    assert len(points) >= 10
    for n, point in enumerate(points, 1):
        for stays in (False, True):
            sb = fresh(sandbox_template, tmp_path / f"full-{n}-{stays}")
            original = sb.snapshot()
            assert sb.run("--vllm-version", "0.17").returncode == 0
            line, journaled = _enospc(sb, n, stays, "rollback")
            assert "nothing written" not in line
            if journaled:
                assert json.loads(sb.run("status", "--json").stdout)["state"] == "interrupted", (point, line)
            elif line.endswith("was finished and recorded after all"):
                assert sb.snapshot() == original, (point, line)
            else:
                assert line.endswith("the installed files were not changed"), (point, line)
                assert sb.snapshot() == patched, (point, line)
            back = sb.run("rollback")
            assert back.returncode == 0, (point, stays, back.stderr)
            assert sb.snapshot() == original and pristine(sb), (point, stays)
            assert sb.run("status").stdout.startswith("original: speculators 0.3.0"), (point, stays)
            shutil.rmtree(tmp_path / f"full-{n}-{stays}")

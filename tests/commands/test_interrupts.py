"""Issue 40, item 5: SIGINT and SIGTERM end every command that makes a temp folder with its
message and exit code (130, 143), and leave nothing in $TMPDIR: the command's own folders
(`vsp-session-*`, `vsp-wheel-*`, ...), the target's (`vsp-rehearse-*`: it is killed with its
process group and cannot remove its own) and pip's.

Each test waits for the command's temp folder to exist, then sends the signal (never after a
fixed sleep). SIGINT goes to the command's whole process group, as a terminal's Ctrl-C does;
SIGTERM to the command alone, as `kill` does.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import realdata
from conftest import Sandbox

pytestmark = pytest.mark.slow

# A stand-in for a target that takes its time (vLLM's import, the rehearsal): the session script
# makes a folder in its temp folder, as the rehearsal's `prepare` does (vsp-rehearse-*), and
# waits; nothing else of the target changes. Installed as a .pth of the sandbox's venv.
HOLD = ("import os, sys; exec(\"if os.environ.get('VSP_HOLD_SESSION') and sys.argv and "
        "sys.argv[0].endswith('session.py'):\\n import tempfile, time\\n "
        "tempfile.mkdtemp(prefix='vsp-rehearse-')\\n time.sleep(600)\")\n")

SIGNALS = [pytest.param(signal.SIGINT, 130, "interrupted", id="SIGINT"),
           pytest.param(signal.SIGTERM, 143, "terminated", id="SIGTERM")]


def _interrupted(sb: Sandbox, tmp_path: Path, args: list[str], made: str, signum: int,
                 env: dict[str, str] | None = None) -> tuple[int, str, list[str]]:
    """Run the CLI with a $TMPDIR of its own, send `signum` once a folder matching `made` exists
    anywhere under it; (exit code, stderr, what is left in $TMPDIR)."""
    tmp = tmp_path / "tmpdir"
    tmp.mkdir()
    inherited = {k: v for k, v in os.environ.items() if not k.startswith("VSP_TEST_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "vllm_shim_patch", "--python", str(sb.python), "--state-dir", str(sb.state), *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        env={**inherited, "TMPDIR": str(tmp), "VSP_CACHE_DIR": str(tmp_path / "cache"), **(env or {})})
    try:
        deadline = time.monotonic() + 240
        while not list(tmp.rglob(made)):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, f"{made} never appeared"
            time.sleep(0.01)
        if signum == signal.SIGINT:
            os.killpg(proc.pid, signum)  # Ctrl-C: the terminal signals the foreground group
        else:
            os.kill(proc.pid, signum)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode, err, sorted(p.name for p in tmp.iterdir())


@pytest.fixture
def holding(sandbox: Sandbox) -> Sandbox:
    (sandbox.site / "zz_vsp_hold_session.pth").write_text(HOLD)
    return sandbox


@pytest.mark.parametrize(("signum", "code", "words"), SIGNALS)
@pytest.mark.parametrize("command", ["verify", "apply", "audit"])
def test_a_command_with_a_target_session_leaves_nothing(holding: Sandbox, tmp_path: Path, reference_vllm_source: Path,
                                                        command: str, signum: int, code: int, words: str) -> None:
    if command == "verify":
        assert holding.run("--vllm-version", "0.16", "--no-verify").returncode == 0
        args = ["verify"]
    elif command == "apply":
        args = ["--vllm-version", "0.16", "--no-rehearse"]
    else:
        args = ["--vllm-source", str(reference_vllm_source), "audit"]
    before = holding.snapshot()
    rc, err, left = _interrupted(holding, tmp_path, args, "vsp-rehearse-*", signum, {"VSP_HOLD_SESSION": "1"})
    assert (rc, err.strip().splitlines()[-1], left) == (code, f"patch-speculators: {words}", [])
    assert holding.snapshot() == before  # an interrupted apply is undone
    if command == "apply":
        status = holding.run("status", "--json")
        assert '"state": "original"' in status.stdout or '"state":"original"' in status.stdout, status.stdout


@pytest.mark.parametrize(("signum", "code", "words"), SIGNALS)
def test_wheel_from_a_scratch_copy_leaves_nothing(sandbox: Sandbox, tmp_path: Path, reference_vllm_source: Path,
                                                  speculators_wheel: Path, signum: int, code: int, words: str) -> None:
    args = ["--vllm-source", str(reference_vllm_source), "wheel", "--vllm-version", realdata.REFERENCE_SERIES, "--no-rehearse",
            "--wheel", str(speculators_wheel), "-o", str(tmp_path / "out")]
    rc, err, left = _interrupted(sandbox, tmp_path, args, "vsp-wheel-*", signum)
    assert (rc, err.strip().splitlines()[-1], left) == (code, f"patch-speculators: {words}", [])
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []

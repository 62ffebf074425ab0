"""Issue 40, item 5, on the real vLLM 0.16.0: a rehearsal interrupted by SIGINT (Ctrl-C, the
foreground group) or SIGTERM (`kill`, the command alone) once its target has made its temp folder
(`vsp-rehearse-*`) ends with "interrupted", exit 130, or "terminated", exit 143, and $TMPDIR is
left empty: the target, killed with its process group, cannot remove its own folder, so it is
made inside the session's (`vsp-session-*`), which the command removes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import Sandbox

pytestmark = [pytest.mark.realvllm, pytest.mark.slow, pytest.mark.xdist_group("interrupts-realvllm")]


@pytest.mark.parametrize(("signum", "code", "words"), [(signal.SIGINT, 130, "interrupted"),
                                                       (signal.SIGTERM, 143, "terminated")], ids=["SIGINT", "SIGTERM"])
def test_an_interrupted_rehearsal_leaves_nothing(real: Sandbox, tmp_path: Path, signum: int, code: int,
                                                 words: str) -> None:
    tmp = tmp_path / "tmpdir"
    tmp.mkdir()
    inherited = {k: v for k, v in os.environ.items() if not k.startswith("VSP_TEST_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "vllm_shim_patch", "--python", str(real.python), "--state-dir", str(real.state),
         "rehearse", "--quick", "--tensor-parallel-size", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        env={**inherited, "TMPDIR": str(tmp)})
    try:
        deadline = time.monotonic() + 300
        while not list(tmp.rglob("vsp-rehearse-*")):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the rehearsal never made its temp folder"
            time.sleep(0.01)
        if signum == signal.SIGINT:
            os.killpg(proc.pid, signum)
        else:
            os.kill(proc.pid, signum)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert (proc.returncode, err.strip().splitlines()[-1]) == (code, f"patch-speculators: {words}")
    assert sorted(p.name for p in tmp.iterdir()) == []

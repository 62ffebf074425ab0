"""The target session runs in a process group of its own, killed once it ends (issue 26): the
rehearsal's vLLM worker processes can outlive it (vLLM 0.12-0.16 under fork: their death pipe
cannot fire) and hold its output pipes; whatever happens, nothing it started is left behind, and
its end is its exit, not the end of its output."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vllm_shim_patch.target import run_grouped

# A script that forks a grandchild (which inherits its stdout and stderr and sleeps on), writes
# the grandchild's pid to a file, echoes its stdin, and exits (or sleeps itself: "hang").
SCRIPT = """
import os, sys, time
pid = os.fork()
if pid == 0:
    time.sleep(600)
    os._exit(0)
open(sys.argv[1], "w").write(str(pid))
print(sys.stdin.read().upper(), flush=True)
if sys.argv[2] == "hang":
    time.sleep(600)
os._exit(4)
"""


def _gone(pid: int) -> bool:
    """Dead: no such process, or a zombie no one reaped yet (a container's init may not)."""
    deadline = time.monotonic() + 30  # the kill is asynchronous; bounded so a failure cannot hang
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state == "Z":
            return True
        time.sleep(0.05)
    return False


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process states from /proc (Linux)")
def test_the_answer_comes_at_the_exit_and_a_process_left_holding_the_pipes_is_killed(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    done = run_grouped([sys.executable, "-c", SCRIPT, str(pid_file), "exit"], stdin="request", timeout=300,
                       cwd=str(tmp_path), env=dict(os.environ))
    assert (done.returncode, done.stdout) == (4, "REQUEST\n")
    assert _gone(int(pid_file.read_text()))


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process states from /proc (Linux)")
def test_a_timeout_kills_the_script_and_everything_it_started(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    with pytest.raises(subprocess.TimeoutExpired):
        # Long enough for the fork, far shorter than the sleeps.
        run_grouped([sys.executable, "-c", SCRIPT, str(pid_file), "hang"], stdin="", timeout=10,
                    cwd=str(tmp_path), env=dict(os.environ))
    assert _gone(int(pid_file.read_text()))
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True).stdout
    assert str(pid_file) not in ps  # the script itself is gone too


def test_a_script_that_exits_before_reading_its_request_is_its_exit_status(tmp_path: Path) -> None:
    done = run_grouped([sys.executable, "-c", "import os; os._exit(3)"], stdin="x" * 1_000_000, timeout=300,
                       cwd=str(tmp_path), env=dict(os.environ))
    assert (done.returncode, done.stdout, done.stderr) == (3, "", "")

"""The patched wheel on the real vLLM 0.16.0 (sparingly: one scratch build with its rehearsal):
built where speculators is not patched, from a scratch copy rehearsed against the target's vLLM
(the target untouched); installed over the target's speculators, `--check` re-plans against the
installed vLLM, and `verify` and `rehearse` run on it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import PARITY_PASSED, Sandbox

pytestmark = [pytest.mark.realvllm, pytest.mark.slow, pytest.mark.xdist_group("wheel-realvllm")]


def test_built_from_a_rehearsed_scratch_copy_and_checked_on_the_real_vllm(
        tmp_path: Path, real: Sandbox, speculators_wheel: Path) -> None:
    before = real.snapshot()
    r = real.run("wheel", "--wheel", str(speculators_wheel), "-o", str(tmp_path / "out"), "--json", timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    data = json.loads(r.stdout)["wheel"]
    assert real.snapshot() == before  # the target is not changed
    assert data["from"] == "a scratch copy patched, verified and rehearsed here"
    assert (data["series"], data["built_for"], data["requires"]) == ("0.16", "0.16.0", "vllm==0.16.*")
    assert data["rehearsal"]["outcome"] == "passed"
    assert data["rehearsal"]["detail"].startswith(PARITY_PASSED)
    assert data["rehearsal"]["topology"] == "tensor parallel size 1, pipeline parallel 1: one worker, rank logic beyond rank 0 not rehearsed"
    assert data["verification"].startswith("passed: 2 imports ok, 22 calls bind (live); rehearsal passed")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(real.python), "install", "--quiet", "--no-deps",
                    data["file"]], check=True, capture_output=True)
    check = real.run("--check")
    assert check.returncode == 0, check.stderr
    assert check.stdout.endswith("RECORD verified; the rules plan the same bytes for the installed vLLM 0.16.0)\n")
    verify = real.run("verify")
    assert verify.returncode == 0 and verify.stdout.splitlines()[-1] == (
        "verify speculators 0.3.0+vsp.vllm0.16: passed: 2 imports ok, 22 calls bind (live)")
    rehearse = real.run("rehearse", timeout=900)
    assert rehearse.returncode == 0, rehearse.stdout[-2000:]
    assert rehearse.stdout.splitlines()[-1].startswith(
        f"speculators 0.3.0+vsp.vllm0.16 on vLLM 0.16.0: {PARITY_PASSED}")

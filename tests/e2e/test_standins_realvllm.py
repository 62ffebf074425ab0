"""The stand-ins against the real thing they replace, on the real vLLM 0.16.0: for every family,
vLLM's model with the rehearsal's attention backend, MLA and MoE stand-ins computes the states
transformers' own implementation of the architecture computes, with the same wide weights (one
300-token prompt: past gpt-oss's 128-token sliding window). The GPU kernels cannot run here;
transformers' eager code is the architecture's reference.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import realdata
from conftest import Sandbox, real_sandbox

import vllm_shim_patch
from vllm_shim_patch._remote.rehearse import families

# One worker runs the whole module (pytest -n): its module-scoped fixtures are built once.
pytestmark = [pytest.mark.realvllm, pytest.mark.slow, pytest.mark.xdist_group("standins")]

REHEARSE = Path(vllm_shim_patch.__file__).parent / "_remote" / "rehearse"
DRIVER = Path(__file__).parent / "crosscheck.py"
# transformers' DeepseekV3 has no Llama-4 attention scaling: mistral-large-3 has no reference there
# (the rehearsal's own check against the model's forward covers it).
ARCHS = [name for name in families.presets() if name != "mistral-large-3"]


@pytest.fixture(scope="module")
def patched(tmp_path_factory: pytest.TempPathFactory, vllm_venv_python: Path, vllm_site: Path) -> Sandbox:
    root = tmp_path_factory.mktemp("standins")
    sb = real_sandbox(root, vllm_venv_python, vllm_site, realdata.speculators_wheel(realdata.OLD_SPECULATORS))
    assert sb.run("--vllm-version", realdata.REFERENCE_SERIES, "--no-rehearse", timeout=900).returncode == 0
    return sb


@pytest.mark.parametrize("arch", ARCHS)
def test_the_stand_ins_compute_what_transformers_computes(patched: Sandbox, arch: str) -> None:
    out = subprocess.run([str(patched.python), str(DRIVER), str(REHEARSE), arch], capture_output=True, text=True,
                         timeout=600, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    answer = json.loads(out.stdout.strip().splitlines()[-1])
    assert answer["outcome"] == "passed", answer["failure"]
    assert answer["architecture"] == families.preset(arch)[1]["architectures"][0]
    assert answer["loaded"] > 0  # vLLM's loader took transformers' weights
    # float32 on both sides: the implementations agree to rounding, far below the bfloat16 run's 1e-2.
    assert all(diff < 1e-5 for diff in answer["crosscheck"].values()), answer["crosscheck"]


def test_the_stand_in_attention_is_torchs_and_the_same_in_any_chunks(vllm_venv_python: Path) -> None:
    # A 700-token prompt whole and in four chunks (one of a single row), against torch's own
    # attention in float64: the rehearsal's check that each sequence equals its prompt's own
    # forward rests on a row's result not depending on the chunk or block it comes in.
    out = subprocess.run([str(vllm_venv_python), str(Path(__file__).parent / "attention_check.py"),
                          str(REHEARSE / "attention.py")], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert out.returncode == 0, out.stderr[-2000:]
    answer = json.loads(out.stdout.strip().splitlines()[-1])
    assert sorted(answer) == ["causal", "sinks", "soft-cap", "window"]
    for name, found in answer.items():
        assert found["chunks_equal_whole"] is True, name
        # float32 results of float64 arithmetic: another CPU's kernels may round a last bit apart.
        assert found["vs_torch"] <= 1e-6, (name, found)

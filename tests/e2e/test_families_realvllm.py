"""The user's model family on the real vLLM 0.16.0: `--model` rehearses the architecture that
will be loaded, from the published config.json of each family (full sizes, shrunk by the
rehearsal), on speculators 0.3.0 after the full apply and on 0.4.0; with the family rules taken
back, each family's own break shows, named with its rule.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import realdata
from conftest import GENERATOR, PARITY_PASSED, QUICK_PASSED, WORKER, Sandbox, real_sandbox

from vllm_shim_patch._remote.rehearse import families

# A worker runs all that one module-scoped fixture serves (pytest -n): each is built once, and
# the two speculators releases' groups run side by side.
pytestmark = [pytest.mark.realvllm, pytest.mark.slow]
ON_030, ON_040 = pytest.mark.xdist_group("families-030"), pytest.mark.xdist_group("families-040")

# Every --arch preset: its published config.json, and the architecture vLLM builds from it.
PRESETS = {name: families.preset(name)[1] for name in families.presets()}


# Each run names tensor parallel size 1: not given, a --model too large for one GPU (DeepSeek-V3,
# Kimi-K2.5, Mistral-Large-3) rehearses at the size its weights need, not capped by the CPUs (8 here: slow).
# What a family does across ranks is test_topology_realvllm.py's; here it is the family alone.
TP1 = ("--tensor-parallel-size", "1")


def model(root: Path, name: str) -> Path:
    folder = root / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(PRESETS[name], indent=2))
    return folder


def verdict(name: str, passed: str = PARITY_PASSED) -> str:
    return f"{passed}; on a tiny {PRESETS[name]['architectures'][0]} built from your config (--model)"


@pytest.fixture(scope="module")
def patched(tmp_path_factory: pytest.TempPathFactory, vllm_venv_python: Path, vllm_site: Path) -> Sandbox:
    """speculators 0.3.0 after the full apply, rehearsed on DeepSeek-V3 (the seed box's family)."""
    root = tmp_path_factory.mktemp("patched")
    sb = real_sandbox(root, vllm_venv_python, vllm_site, realdata.speculators_wheel(realdata.OLD_SPECULATORS))
    r = sb.run("--vllm-version", realdata.REFERENCE_SERIES, "--model", str(model(root, "deepseek")), *TP1, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip().endswith(verdict("deepseek")), r.stdout
    return sb


# Each family with the short workload: the parity workload of every family on every release the
# matrix ran is docs/compatibility.md's (held to the family table by test_compatibility_doc.py);
# the stand-ins a family needs are built and checked alike by both workloads.
@ON_030
@pytest.mark.parametrize("name", sorted(PRESETS))
def test_each_family_passes_speculators_030_after_the_full_apply(patched: Sandbox, tmp_path: Path, name: str) -> None:
    r = patched.run("rehearse", "--model", str(model(tmp_path, name) / "config.json"), *TP1, "--quick", "--json",
                    timeout=900)
    data = json.loads(r.stdout)
    assert (r.returncode, data["outcome"]) == (0, "passed"), data.get("failure")
    assert data["architecture"] == PRESETS[name]["architectures"][0]
    assert data["max_rel_diff"] == 0.0 and data["sensitivity"] > 0.01
    assert all(c["ok"] for c in data["checks"])
    kinds = data["layers"]
    text = PRESETS[name].get("text_config", PRESETS[name])
    assert ("MLAAttention" in kinds) == ("kv_lora_rank" in text)  # DeepSeek's own attention, not a plain one
    moe = any(k in text for k in ("n_routed_experts", "num_experts", "num_local_experts"))
    assert moe == bool(kinds.get("MoE")), kinds  # expert layers by role (vLLM 0.24 made FusedMoE a factory)


def test_the_eagle3_gate_refuses_deepseek_when_its_rule_is_skipped(real: Sandbox, tmp_path: Path) -> None:
    before = real.snapshot()
    r = real.run("--vllm-version", realdata.REFERENCE_SERIES, "--model", str(model(tmp_path, "deepseek")), *TP1, "--skip",
                 "worker-no-eagle3-gate", timeout=900)
    assert r.returncode == 1
    assert real.snapshot() == before
    # Lines of the file as written (the capture hooks' helpers above the class): the gate's raise.
    assert r.stdout.strip().endswith(
        f"verification failed: rehearsal failed in init at {WORKER}:171: ValueError: Model DeepseekV3ForCausalLM "
        "does not support hidden state extraction; on a tiny DeepseekV3ForCausalLM built from your config "
        "(--model); restored 2 files, nothing recorded"), r.stdout
    assert ("  fix:         rule worker-no-eagle3-gate (skipped with --skip/--only: it would edit "
            f"{WORKER}:170)") in r.stderr


def test_without_the_capture_hooks_qwen3_vl_crashes_and_mistral_large_3_is_silently_wrong(
        real: Sandbox, tmp_path: Path) -> None:
    skip = ("--skip", "worker-capture-hooks")
    assert real.run("--vllm-version", realdata.REFERENCE_SERIES, "--no-rehearse", *skip, timeout=900).returncode == 0
    r = real.run("rehearse", "--model", str(model(tmp_path, "qwen3-vl")), *TP1, *skip, timeout=900)
    assert r.returncode == 1
    assert r.stdout.splitlines()[-1] == (
        f"speculators 0.3.0 on vLLM {realdata.REFERENCE_VLLM}: rehearsal failed in init at {GENERATOR}:156: "
        "TypeError: _patched_forward() got an unexpected keyword argument 'deepstack_input_embeds'; on a tiny "
        "Qwen3VLForConditionalGeneration built from your config (--model)")
    assert (f"  fix:         rule worker-capture-hooks (skipped with --skip/--only: it would edit {WORKER}:127)"
            in r.stdout)
    # DeepSeek-V3's architecture with Llama-4 attention scaling (shrunk: q scaled from row 512 on):
    # speculators' own forward drops the scaling; every row from there on matches no prompt.
    r = real.run("rehearse", "--model", str(model(tmp_path, "mistral-large-3")), *TP1, *skip, timeout=900)
    assert r.returncode == 1
    last = r.stdout.splitlines()[-1]
    assert last.startswith(f"speculators 0.3.0 on vLLM {realdata.REFERENCE_VLLM}: rehearsal failed: 19 of 40 "
                           "sequences wrong (call 1: prompt 0 has 512 own rows then 1,433 rows of no prompt; "), last
    assert "  fix:         rule worker-capture-hooks (skipped with --skip/--only" in r.stdout


@pytest.fixture(scope="module")
def patched_040(tmp_path_factory: pytest.TempPathFactory, vllm_venv_python: Path, vllm_site: Path) -> Sandbox:
    """speculators 0.4.0: with the capture hooks taken back it drops llama_4_scaling like 0.3.0
    (silently wrong); the full apply fixes that there too."""
    root = tmp_path_factory.mktemp("patched-040")
    sb = real_sandbox(root, vllm_venv_python, vllm_site, realdata.speculators_wheel(realdata.NEW_SPECULATORS))
    skip = ("--skip", "worker-capture-hooks")
    assert sb.run("--vllm-version", realdata.REFERENCE_SERIES, "--no-rehearse", *skip, timeout=900).returncode == 0
    r = sb.run("rehearse", "--model", str(model(root, "mistral-large-3")), *TP1, *skip, timeout=900)
    assert r.returncode == 1
    assert ("rehearsal failed: 19 of 40 sequences wrong (call 1: prompt 0 has 512 own rows then 1,433 rows of no "
            "prompt; ") in r.stdout.splitlines()[-1]
    assert sb.run("rollback").returncode == 0
    r = sb.run("--vllm-version", realdata.REFERENCE_SERIES, "--model", str(root / "mistral-large-3"), *TP1, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip().endswith(verdict("mistral-large-3"))
    return sb


@ON_040
@pytest.mark.parametrize("name", sorted(set(PRESETS) - {"mistral-large-3"}))
def test_each_family_passes_speculators_040_after_apply(patched_040: Sandbox, tmp_path: Path, name: str) -> None:
    r = patched_040.run("rehearse", "--model", str(model(tmp_path, name)), *TP1, "--quick", timeout=900)
    assert (r.returncode, r.stdout.splitlines()[-1]) == (
        0, f"speculators {realdata.NEW_SPECULATORS} on vLLM {realdata.REFERENCE_VLLM}: {verdict(name, QUICK_PASSED)}")


def test_speculators_0401_on_kimi_k25_after_apply(tmp_path: Path, vllm_venv_python: Path, vllm_site: Path) -> None:
    sb = real_sandbox(tmp_path, vllm_venv_python, vllm_site, realdata.speculators_wheel(realdata.SPECULATORS[2]))
    r = sb.run("--vllm-version", realdata.REFERENCE_SERIES, "--model", str(model(tmp_path, "kimi-k2.5")), *TP1, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip().endswith(verdict("kimi-k2.5"))


REMOTE_TOKENIZER = '''"""A tokenizer that is the checkpoint's own code, as Kimi-K2.5's tokenization_kimi.py is."""
from transformers import PreTrainedTokenizerFast


class KimiTokenizer(PreTrainedTokenizerFast):
    pass
'''


def test_a_remote_code_tokenizer_needs_trust_remote_code(real: Sandbox, tmp_path: Path) -> None:
    from vllm_shim_patch._remote.rehearse import model_folder

    folder = model(tmp_path, "kimi-k2.5")
    tok, tok_cfg = model_folder.tokenizer(163840, 2048, {"<|media_pad|>": 163605})
    (folder / "tokenizer.json").write_text(json.dumps(tok))
    (folder / "tokenization_kimi.py").write_text(REMOTE_TOKENIZER)
    (folder / "tokenizer_config.json").write_text(json.dumps({
        **tok_cfg, "tokenizer_class": "KimiTokenizer",
        "auto_map": {"AutoTokenizer": ["tokenization_kimi.KimiTokenizer", None]}}))
    before = real.snapshot()
    r = real.run("--vllm-version", realdata.REFERENCE_SERIES, "--model", str(folder), *TP1, timeout=900)
    assert r.returncode == 1
    assert real.snapshot() == before
    assert f"rehearsal failed in init at {GENERATOR}:84: ValueError: " in r.stderr
    assert "  fix:         rule tokenizer-trust-remote-code (opt-in: run again with --trust-remote-code)" in r.stderr
    r = real.run("--vllm-version", realdata.REFERENCE_SERIES, "--model", str(folder), *TP1, "--trust-remote-code", timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip().endswith(verdict("kimi-k2.5"))
    assert "with --trust-remote-code" in real.run("status").stdout

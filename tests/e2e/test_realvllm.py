"""End-to-end on a real environment: vllm==0.16.0 really installed (CPU import), live signatures.

The vLLM venv is built once and cached outside the repo by tests/e2e/build_env.py (keyed by the
committed constraints file). The tests never modify it: each one gets a small venv holding its
own speculators 0.3.0 (--no-deps), which sees the cached vLLM through a .pth file (the `real`
fixture in conftest.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from realdata import REFERENCE_SERIES, REFERENCE_VLLM
from conftest import DEFAULT_MODEL, EDITS, GENERATOR, PARITY_PASSED, Sandbox

from vllm_shim_patch.signatures import LiveSignatures, StaticSignatures

pytestmark = [pytest.mark.realvllm, pytest.mark.slow]



def test_target_sees_real_vllm_and_its_own_speculators(real: Sandbox) -> None:
    r = real.run("status", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert (data["vllm_installed"], data["location"], data["state"]) == (REFERENCE_VLLM, str(real.site), "not tracked")


def test_unpatched_imports_but_does_not_bind(real: Sandbox) -> None:
    r = real.run("verify", "--all", "--json", timeout=900)
    assert r.returncode == 1, r.stderr
    data = json.loads(r.stdout)
    assert data["signatures"] == "live"
    generator = next(i for i in data["imports"]
                     if i["module"] == "speculators.data_generation.vllm_hidden_states_generator")
    assert generator["status"] == "ok", generator
    bad = [(b["line"], b["callee"], b["reason"]) for b in data["bindings"] if b["status"] != "ok"]
    assert bad == [
        (136, "vllm.v1.core.kv_cache_utils.get_kv_cache_config_from_groups",
         "unexpected keyword argument 'kv_cache_specs'"),
        (148, "vllm.v1.core.sched.scheduler.Scheduler", "missing required argument 'block_size'"),
        (194, "vllm.config.SchedulerConfig", "missing required argument 'is_encoder_decoder'"),
    ]


def test_apply_verifies_live_then_rollback(real: Sandbox) -> None:
    before = real.snapshot()
    r = real.run("--vllm-version", REFERENCE_SERIES, timeout=900)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == (
        f"patched speculators 0.3.0 for vLLM 0.16: {EDITS} edits in 2 files; vLLM 0.16 (static); verification "
        f"passed: 2 imports ok, 22 calls bind (live); {PARITY_PASSED}{DEFAULT_MODEL}"
    )
    text = (real.site / GENERATOR).read_text()
    assert "eos_token_id=self.tokenizer.eos_token_id," in text  # 0.16.0 still requires it
    assert "kv_cache_specs=" not in text
    assert "block_size=self.vllm_config.cache_config.block_size," in text
    assert "enable_prefix_caching=False," in text
    assert "model_output = self.executor.sample_tokens(None)" in text
    assert "aux_hidden_states = captured_states_list\n" in text
    worker = (real.site / "speculators/data_generation/custom_worker.py").read_text()
    # The model's own forward runs (the capture hooks): speculators' forward stays as released,
    # unbound, never run; no edit of it (llama-model-embed-input-ids: not needed).
    assert "_add_capture_hooks(self, base_model)" in worker and "base_model.forward =" not in worker
    assert "else self.get_input_embeddings(input_ids)" in worker
    v = real.run("verify", timeout=900)
    assert v.returncode == 0, v.stdout + v.stderr
    # Every call into vLLM of the two rewritten files, all live: nothing left unchecked.
    assert v.stdout.splitlines()[-1] == "verify speculators 0.3.0: passed: 2 imports ok, 22 calls bind (live)"
    assert [line for line in v.stdout.splitlines() if line.startswith(f"{GENERATOR}:1")][3:8] == [
        f"{GENERATOR}:136: vllm.v1.core.kv_cache_utils.get_kv_cache_config_from_groups: ok",
        f"{GENERATOR}:143: vllm.v1.structured_output.StructuredOutputManager: ok",
        f"{GENERATOR}:147: vllm.v1.core.sched.scheduler.Scheduler: ok",
        f"{GENERATOR}:166: vllm.config.CacheConfig: ok",
        f"{GENERATOR}:181: vllm.config.VllmConfig: ok",
    ]
    again = real.run("--vllm-version", REFERENCE_SERIES, timeout=900)
    assert again.returncode == 0 and "already patched" in again.stdout, again.stdout + again.stderr
    back = real.run("rollback")
    assert back.returncode == 0, back.stderr
    assert real.snapshot() == before


def test_static_and_live_agree_on_every_callee(real: Sandbox, vllm_site: Path) -> None:
    from vllm_shim_patch.analysis.calls import scan

    callees = sorted({c.callee for p in (real.site / "speculators").rglob("*.py")
                      for c in scan(p.read_bytes(), str(p))})
    assert len(callees) == 19
    static = StaticSignatures(vllm_site).get_many(callees)
    live = LiveSignatures(str(real.python), timeout=600).get_many(callees)
    assert [c for c in callees if static[c] is None or live[c] is None] == []
    assert {c: static[c].params for c in callees} == {c: live[c].params for c in callees}

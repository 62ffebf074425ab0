"""The Model Runner V2 rules (vLLM 0.34 removed V1) on the real speculators wheels: exact diffs
of worker-v2-forward-batch and generator-kv-cache-up-front, their guards on what vLLM 0.16 / 0.34
define, the guard sentences that tell "V1 gone" from "V1 the only runner", and
kv-cache-resolve-layout's form by the version where no vLLM can be read."""

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

WORKER = "speculators/data_generation/custom_worker.py"
GENERATOR = "speculators/data_generation/vllm_hidden_states_generator.py"
V1_MODULE = "vllm.v1.worker.gpu_model_runner"
PREPARE = "vllm.v1.worker.gpu.model_runner.GPUModelRunner.prepare_inputs"
V2_CHOICE = "vllm.config.VllmConfig.use_v2_model_runner"
# What the guards read, as the static reader answers them on the real sources (checked against
# them below): 0.16 has V1 alone, 0.25.1-0.33 both, 0.34 V2 alone.
FACTS_016 = {V1_MODULE: True, PREPARE: True, V2_CHOICE: False}
FACTS_033 = {V1_MODULE: True, PREPARE: True, V2_CHOICE: True}
FACTS_034 = {V1_MODULE: False, PREPARE: True, V2_CHOICE: False}

WORKER_040 = r'''--- a/speculators/data_generation/custom_worker.py
+++ b/speculators/data_generation/custom_worker.py
@@ -94,21 +94,55 @@ worker-v2-forward-batch
     """
 
     def _store_captured_states(self, aux_hidden_states):
+        # vLLM's Model Runner V2 has no input_batch: this forward's rows of each request, through the
+        # batch prepare_inputs built for it, in that batch's order.
+        metadata = getattr(self, "_current_request_metadata", None)
+        aux_hidden_states, sorted_metadata = self._forward_rows(aux_hidden_states, metadata)
+        if sorted_metadata is not None:
+            self._request_metadata.append(sorted_metadata)  # type: ignore[has-type]
         if self._captured_states is None:  # type: ignore[has-type]
             self._captured_states = [[h] for h in aux_hidden_states]
         else:
             for i, h in enumerate(aux_hidden_states):
                 self._captured_states[i].append(h)
 
-        metadata = getattr(self, "_current_request_metadata", None)
-        if metadata is not None:
-            # Sort by vLLM's actual batch position (vLLM reorders requests internally)
-            input_batch = self.model_runner.input_batch  # type: ignore[attr-defined]
-            sorted_metadata = sorted(
-                metadata.items(),
-                key=lambda item: input_batch.req_id_to_index.get(item[0], float("inf")),
-            )
-            self._request_metadata.append(sorted_metadata)  # type: ignore[has-type]
+    def _keep_forward_batch(self):
+        """Keep the batch Model Runner V2 builds for each forward (prepare_inputs): the runner holds
+        it only after the forward (execute_model_state), and its req_states are slots, not positions."""
+        runner = self.model_runner  # type: ignore[attr-defined]
+        if getattr(runner.prepare_inputs, "_keeps_forward_batch", False):
+            return
+        prepare_inputs = runner.prepare_inputs
+
+        def keep_forward_batch(*args, **kwargs):
+            self._forward_batch = prepare_inputs(*args, **kwargs)
+            return self._forward_batch
+
+        keep_forward_batch._keeps_forward_batch = True
+        runner.prepare_inputs = keep_forward_batch
+
+    def _forward_rows(self, aux_hidden_states, metadata):
+        """This forward's rows of each request of `metadata` (request id -> tokens) in the batch's
+        order, and its (request id, tokens) in that order; as they are where `metadata` is None."""
+        batch, self._forward_batch = getattr(self, "_forward_batch", None), None
+        if metadata is None:
+            return aux_hidden_states, None
+        if batch is None:
+            raise RuntimeError("no batch of the model runner for this forward (prepare_inputs did not run for it)")
+        position = {req_id: i for i, req_id in enumerate(batch.req_ids)}
+        missing = sorted(set(metadata) - set(position))
+        if missing:
+            raise RuntimeError(f"requests {missing} are not in the model runner's batch")
+        ordered = sorted(metadata.items(), key=lambda item: position[item[0]])
+        starts = batch.query_start_loc_np
+        rows = []
+        for req_id, num_tokens in ordered:
+            start, end = int(starts[position[req_id]]), int(starts[position[req_id] + 1])
+            if num_tokens > end - start:
+                raise RuntimeError(f"request {req_id} has fewer rows in the forward than the tokens scheduled for it")
+            rows.extend(range(start, start + num_tokens))
+        index = torch.tensor(rows, dtype=torch.long, device=aux_hidden_states[0].device)
+        return [h.index_select(0, index) for h in aux_hidden_states], ordered
 
     def _setup_hidden_states_capture(self, layer_ids: list[int]):
         """Setup model to capture auxiliary hidden states from specific layers"""
@@ -134,6 +168,8 @@ worker-v2-forward-batch
         base_model._extension = self  # noqa: SLF001
         base_model.forward = types.MethodType(_patched_forward, base_model)
         logger.info(f"Hidden states capture setup complete for layers {layer_ids}")
+        # Model Runner V2: each forward's batch, for the rows' requests.
+        self._keep_forward_batch()
 
     def _set_request_metadata(self, request_metadata: dict[str, int]):
         """Set request metadata for the next forward pass.
'''

WORKER_030 = r'''--- a/speculators/data_generation/custom_worker.py
+++ b/speculators/data_generation/custom_worker.py
@@ -86,11 +86,56 @@ worker-request-tracking, worker-v2-forward-batch
     """
 
     def _store_captured_states(self, aux_hidden_states):
+        requests = getattr(self, "_request_metadata", None)
+        if requests is not None:
+            # Inside generate(). vLLM's Model Runner V2 has no input_batch: this forward's rows of each
+            # request, through the batch prepare_inputs built for it, in that batch's order.
+            metadata, self._current_request_metadata = self._current_request_metadata, None
+            aux_hidden_states, metadata = self._forward_rows(aux_hidden_states, metadata)
+            requests.append(metadata)
         if self._captured_states is None:  # type: ignore[has-type]
             self._captured_states = [[h] for h in aux_hidden_states]
         else:
             for i, h in enumerate(aux_hidden_states):
                 self._captured_states[i].append(h)
+
+    def _keep_forward_batch(self):
+        """Keep the batch Model Runner V2 builds for each forward (prepare_inputs): the runner holds
+        it only after the forward (execute_model_state), and its req_states are slots, not positions."""
+        runner = self.model_runner  # type: ignore[attr-defined]
+        if getattr(runner.prepare_inputs, "_keeps_forward_batch", False):
+            return
+        prepare_inputs = runner.prepare_inputs
+
+        def keep_forward_batch(*args, **kwargs):
+            self._forward_batch = prepare_inputs(*args, **kwargs)
+            return self._forward_batch
+
+        keep_forward_batch._keeps_forward_batch = True
+        runner.prepare_inputs = keep_forward_batch
+
+    def _forward_rows(self, aux_hidden_states, metadata):
+        """This forward's rows of each request of `metadata` (request id -> tokens) in the batch's
+        order, and its (request id, tokens) in that order; as they are where `metadata` is None."""
+        batch, self._forward_batch = getattr(self, "_forward_batch", None), None
+        if metadata is None:
+            return aux_hidden_states, None
+        if batch is None:
+            raise RuntimeError("no batch of the model runner for this forward (prepare_inputs did not run for it)")
+        position = {req_id: i for i, req_id in enumerate(batch.req_ids)}
+        missing = sorted(set(metadata) - set(position))
+        if missing:
+            raise RuntimeError(f"requests {missing} are not in the model runner's batch")
+        ordered = sorted(metadata.items(), key=lambda item: position[item[0]])
+        starts = batch.query_start_loc_np
+        rows = []
+        for req_id, num_tokens in ordered:
+            start, end = int(starts[position[req_id]]), int(starts[position[req_id] + 1])
+            if num_tokens > end - start:
+                raise RuntimeError(f"request {req_id} has fewer rows in the forward than the tokens scheduled for it")
+            rows.extend(range(start, start + num_tokens))
+        index = torch.tensor(rows, dtype=torch.long, device=aux_hidden_states[0].device)
+        return [h.index_select(0, index) for h in aux_hidden_states], ordered
 
     def _setup_hidden_states_capture(self, layer_ids: list[int]):
         """Setup model to capture auxiliary hidden states from specific layers"""
@@ -108,6 +153,8 @@ worker-v2-forward-batch
         base_model._extension = self  # noqa: SLF001
         base_model.forward = types.MethodType(_patched_forward, base_model)
         logger.info(f"Hidden states capture setup complete for layers {layer_ids}")
+        # Model Runner V2: each forward's batch, for the rows' requests.
+        self._keep_forward_batch()
 
     def _reset_capture(self):
         """Reset captured states before starting a new batch"""
@@ -116,19 +163,28 @@ worker-request-tracking
                 "Must call _setup_hidden_states_capture before capturing states"
             )
         self._captured_states = None  # type: ignore[assignment]
+        self._request_metadata = []
+        self._current_request_metadata = None
+
+    def _set_request_metadata(self, request_metadata):
+        """The next forward's tokens per request id (sent by the generator before each step)."""
+        self._current_request_metadata = request_metadata
 
     def _get_captured_states(self):
-        """Get the captured hidden states
-
-        Returns:
-            List of tensors, one per target layer, or None if no states captured
-        """
+        """The captured hidden states by request id: one tensor per target layer (None: none)."""
         if self._captured_states is None:
             return None
-        # Concatenate lists of tensors into single tensors
-        result = [
-            torch.cat(layer_tensors, dim=0) for layer_tensors in self._captured_states
-        ]
-        # Clear intermediate storage after concatenating
-        self._captured_states = None  # type: ignore[assignment]
-        return result
+        result = {}
+        for step, metadata in enumerate(self._request_metadata):
+            offset = 0
+            for req_id, num_tokens in metadata or ():
+                layers = result.setdefault(req_id, [[] for _ in self._captured_states])
+                for chunks, tensors in zip(layers, self._captured_states):
+                    chunks.append(tensors[step][offset : offset + num_tokens])
+                offset += num_tokens
+        self._captured_states = None
+        self._request_metadata = []
+        return {
+            req_id: [torch.cat(chunks, dim=0) for chunks in layers]
+            for req_id, layers in result.items()
+        }
'''

GENERATOR_030 = r'''--- a/speculators/data_generation/vllm_hidden_states_generator.py
+++ b/speculators/data_generation/vllm_hidden_states_generator.py
@@ -166,6 +166,7 @@ generator-kv-cache-up-front
         cache_config = CacheConfig(
             block_size=VLLM_BLOCK_SIZE,
             gpu_memory_utilization=gpu_memory_utilization,
+            enable_extensible_kv_cache=False,
         )
 
         # For prefill-only workloads, use conservative scheduler limits
'''

GENERATOR_040 = r'''--- a/speculators/data_generation/vllm_hidden_states_generator.py
+++ b/speculators/data_generation/vllm_hidden_states_generator.py
@@ -188,6 +188,7 @@ generator-kv-cache-up-front
             gpu_memory_utilization=gpu_memory_utilization,
             # disable to prevent cache state leakage
             enable_prefix_caching=False,
+            enable_extensible_kv_cache=False,
         )
 
         # For prefill-only workloads, use conservative scheduler limits
'''


def _source(version: str, path: str) -> bytes:
    with zipfile.ZipFile(realdata.speculators_wheel(version)) as zf:
        return zf.read(path)


def _engine(*ids: str, version: str = "0.34", facts: dict[str, bool | None] | None = None) -> Engine:
    pack = load_pack()
    return Engine([pack.by_id(i) for i in ids], version=Version(version), facts=facts, codemod_seconds=None)


@pytest.mark.slow  # the real wheels
@pytest.mark.parametrize(("version", "rules", "diff", "edits"), [
    pytest.param("0.3.0", ("worker-request-tracking", "worker-v2-forward-batch"), WORKER_030,
                 [("worker-request-tracking", 88), ("worker-request-tracking", 120),
                  ("worker-v2-forward-batch", 88), ("worker-v2-forward-batch", 95)], id="0.3.0"),
    pytest.param("0.4.0", ("worker-v2-forward-batch",), WORKER_040,
                 [("worker-v2-forward-batch", 96), ("worker-v2-forward-batch", 113)], id="0.4.0"),
    pytest.param("0.4.0.1", ("worker-v2-forward-batch",), WORKER_040,
                 [("worker-v2-forward-batch", 96), ("worker-v2-forward-batch", 113)], id="0.4.0.1"),
])
def test_the_worker_takes_each_forwards_batch_on_v2(version: str, rules: tuple[str, ...], diff: str,
                                                    edits: list[tuple[str, int]]) -> None:
    result = _engine(*rules, facts=FACTS_034).transform(_source(version, WORKER), WORKER)
    assert [(s.rule_id, s.line) for s in result.sites if s.action == "edited"] == edits
    assert [s for s in result.sites if s.action != "edited"] == []
    assert file_diff(result) == diff
    assert b"input_batch" not in result.after.replace(b"has no input_batch", b"")
    compile(result.after, WORKER, "exec", dont_inherit=True)
    again = _engine(*rules, facts=FACTS_034).transform(result.after, WORKER)
    assert (again.status, again.after) == ("unchanged", result.after)


@pytest.mark.slow  # the real wheels
@pytest.mark.parametrize("version", realdata.SPECULATORS)
def test_the_whole_selection_on_v2_leaves_no_read_of_input_batch(version: str) -> None:
    """After every default rule (the capture hooks and the request tracking first), the V2 rule
    still finds its shapes: the worker reads no input_batch on 0.34."""
    result = Engine(load_pack().selected().rules, version=Version("0.34"), facts=FACTS_034,
                    codemod_seconds=None).transform(_source(version, WORKER), WORKER)
    assert [(s.rule_id, s.action) for s in result.sites if s.rule_id == "worker-v2-forward-batch"] == [
        ("worker-v2-forward-batch", "edited"), ("worker-v2-forward-batch", "edited")]
    assert b"input_batch" not in result.after.replace(b"has no input_batch", b"")
    assert b"self._keep_forward_batch()" in result.after


@pytest.mark.slow  # the real wheels
@pytest.mark.parametrize(("version", "facts", "message"), [
    pytest.param("0.16", FACTS_016, "not needed for this vLLM: the worker still runs on Model Runner V1 "
                 "(vllm.v1.worker.gpu_model_runner is there), whose input_batch it reads (generator-v1-runner "
                 "keeps it on V1)", id="0.16"),
    pytest.param("0.33", FACTS_033, "not needed for this vLLM: the worker still runs on Model Runner V1 "
                 "(vllm.v1.worker.gpu_model_runner is there), whose input_batch it reads (generator-v1-runner "
                 "keeps it on V1)", id="0.33"),
    pytest.param("0.33", None, "not needed before vLLM 0.34.0", id="0.33-unguarded"),
])
def test_the_worker_is_left_on_v1_where_v1_is_there(version: str, facts: dict[str, bool] | None,
                                                    message: str) -> None:
    source = _source("0.4.0", WORKER)
    result = _engine("worker-v2-forward-batch", version=version, facts=facts).transform(source, WORKER)
    assert result.after == source
    assert [(s.rule_id, s.action, s.line, s.message, s.guarded) for s in result.sites] == [
        ("worker-v2-forward-batch", "not-needed", 75, message, facts is not None)]


@pytest.mark.slow  # the real wheel
@pytest.mark.parametrize(("facts", "message"), [
    pytest.param(FACTS_034, "not needed for this vLLM: Model Runner V1 is gone (no vllm.v1.worker.gpu_model_runner): "
                 "the worker runs on Model Runner V2 (worker-v2-forward-batch)", id="0.34"),
    pytest.param(FACTS_016, "not needed for this vLLM: Model Runner V1 is its only runner (VllmConfig does not "
                 "define use_v2_model_runner)", id="0.16"),
])
def test_generator_v1_runner_tells_v1_gone_from_v1_only(facts: dict[str, bool], message: str) -> None:
    source = _source("0.4.0", GENERATOR)
    result = _engine("generator-v1-runner", facts=facts).transform(source, GENERATOR)
    assert result.after == source
    assert [(s.rule_id, s.action, s.message) for s in result.sites] == [
        ("generator-v1-runner", "not-needed", message)]


@pytest.mark.slow  # the real wheels
@pytest.mark.parametrize(("version", "diff", "line"), [
    pytest.param("0.3.0", GENERATOR_030, 166, id="0.3.0"),
    pytest.param("0.4.0", GENERATOR_040, 186, id="0.4.0"),
    pytest.param("0.4.0.1", GENERATOR_040, 186, id="0.4.0.1"),
])
def test_the_generator_takes_the_kv_cache_up_front(version: str, diff: str, line: int) -> None:
    result = _engine("generator-kv-cache-up-front").transform(_source(version, GENERATOR), GENERATOR)
    assert [(s.rule_id, s.action, s.line) for s in result.sites] == [("generator-kv-cache-up-front", "edited", line)]
    assert file_diff(result) == diff
    again = _engine("generator-kv-cache-up-front").transform(result.after, GENERATOR)
    assert (again.status, again.after) == ("unchanged", result.after)


LAYOUT_SOURCE = b'''class VllmHiddenStatesGenerator:
    def __init__(self):
        kv_cache_spec_list = self.executor.collective_rpc("get_kv_cache_spec")
        kv_cache_config = get_kv_cache_config_from_groups(self.vllm_config, groups, mem)
'''


@pytest.mark.parametrize(("version", "publish"), [
    ("0.29", b"self.executor.set_kv_cache_layout(kv_cache_layout.name)\n"),
    ("0.32", b"self.executor.set_kv_cache_layout(kv_cache_layout.name)\n"),
    ("0.33", b"self.executor.set_kv_cache_layout(\n"
             b"            kv_cache_layout.name, self.vllm_config.parallel_config.cp_kv_cache_interleave_size\n"),
])
def test_the_layout_is_resolved_from_029_where_no_vllm_can_be_read(version: str, publish: bytes) -> None:
    """Unguarded (no vLLM visible), since and the version decide: 0.29-0.32 need the layout
    resolved too, and publish it by name alone."""
    result = _engine("kv-cache-resolve-layout", version=version).transform(LAYOUT_SOURCE, GENERATOR)
    assert [(s.rule_id, s.action, s.guarded) for s in result.sites] == [("kv-cache-resolve-layout", "edited", False)]
    assert publish in result.after


def test_the_layout_is_not_resolved_before_029_unguarded() -> None:
    result = _engine("kv-cache-resolve-layout", version="0.28").transform(LAYOUT_SOURCE, GENERATOR)
    assert result.after == LAYOUT_SOURCE
    assert [(s.rule_id, s.action, s.message) for s in result.sites] == [
        ("kv-cache-resolve-layout", "not-needed", "not needed before vLLM 0.29.0")]


@pytest.mark.slow  # the real vLLM sources
@pytest.mark.parametrize(("release", "facts"), [
    pytest.param("0.16.0", FACTS_016, id="0.16.0"),
    pytest.param("0.33.0", FACTS_033, id="0.33.0"),  # V1 and V2 side by side, as from 0.25.1
    pytest.param("0.34.0", FACTS_034, id="0.34.0"),
])
def test_the_facts_are_what_the_real_sources_answer(release: str, facts: dict[str, bool]) -> None:
    from vllm_shim_patch.signatures.static import StaticSignatures

    source = StaticSignatures(realdata.vllm_source(release))
    assert {name: source.defines(name) for name in facts} == facts

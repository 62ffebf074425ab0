"""The model-family rules (rules/speculators-families.yaml) on the real speculators wheels: exact
diffs, the default selection, the opt-in, and the structure of the hooks the worker registers."""

from __future__ import annotations

import sys
import types
import zipfile
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version

from vllm_shim_patch.report.diff import file_diff
from vllm_shim_patch.rewrite.engine import Engine
from vllm_shim_patch.rules.loader import load_pack

sys.path.insert(0, str(Path(__file__).parents[1]))
import realdata  # noqa: E402

WORKER = "speculators/data_generation/custom_worker.py"
GENERATOR = "speculators/data_generation/vllm_hidden_states_generator.py"
WORKER_RULES = ("worker-no-eagle3-gate", "worker-language-model-stack", "worker-capture-hooks")

WORKER_030 = r'''--- a/speculators/data_generation/custom_worker.py
+++ b/speculators/data_generation/custom_worker.py
@@ -1,12 +1,10 @@ worker-no-eagle3-gate, worker-capture-hooks
 """Custom worker extension for hidden states capture."""
 
 import logging
-import types
 from itertools import islice
 
 import torch
 from vllm.distributed import get_pp_group, get_tp_group
-from vllm.model_executor.models.interfaces import supports_eagle3
 from vllm.sequence import IntermediateTensors
 
 __all__ = ["HiddenStatesWorkerExtension"]
@@ -64,6 +62,60 @@ worker-capture-hooks
     return hidden_states
 
 
+def _layer_hidden_states(layer, output):
+    """What a decoder layer hands the next one: its hidden states plus the residual it carries."""
+    if isinstance(output, torch.Tensor):
+        return output.clone()
+    if isinstance(output, tuple) and len(output) == 2:
+        hidden_states, residual = output
+        return (hidden_states if residual is None else hidden_states + residual).clone()
+    raise RuntimeError(
+        f"{type(layer).__name__} returned {type(output).__name__}, not (hidden_states, residual): "
+        "its hidden states cannot be captured"
+    )
+
+
+def _add_capture_hooks(extension, base_model):
+    """Capture the target layers' outputs with forward hooks on the base model's decoder layers.
+
+    Hooks on the base model itself would never run: vLLM's support_torch_compile gives its class
+    a __call__ that calls forward directly when compilation is off (enforce_eager). So this
+    rank's first decoder layer starts each forward's capture and its last one ends it. Hooks of
+    an earlier setup are removed first.
+    """
+    for handle in getattr(extension, "_capture_hooks", ()):
+        handle.remove()
+    extension._capture_hooks = []
+    start, end = base_model.start_layer, base_model.end_layer
+    if start >= end:
+        return  # no decoder layer on this pipeline rank: nothing to capture
+    captured = {}
+
+    def start_forward(module, args):
+        captured.clear()
+
+    def capture(layer_id):
+        def hook(module, args, output):
+            # Only TP rank 0 captures: every rank computes the same states.
+            if get_tp_group().rank_in_group == 0:
+                captured[layer_id] = _layer_hidden_states(module, output)
+
+        return hook
+
+    def end_forward(module, args, output):
+        if get_pp_group().is_last_rank and get_tp_group().rank_in_group == 0 and captured:
+            extension._store_captured_states([captured[i] for i in sorted(captured)])
+        captured.clear()
+
+    layers = base_model.layers
+    hooks = [layers[start].register_forward_pre_hook(start_forward)]
+    targets = [i for i in sorted(extension._layer_ids) if start <= i < end]
+    hooks += [layers[i].register_forward_hook(capture(i)) for i in targets]
+    # After the capture hooks: torch runs a module's forward hooks in the order they were added.
+    hooks.append(layers[end - 1].register_forward_hook(end_forward))
+    extension._capture_hooks = hooks
+
+
 class HiddenStatesWorkerExtension:
     """Worker extension that adds hidden states capture functionality.
 
@@ -99,14 +151,20 @@ worker-no-eagle3-gate, worker-capture-hooks
 
         model = self.model_runner.model  # type: ignore[attr-defined]
 
-        if not supports_eagle3(model):
+        # Not only SupportsEagle3 models: vLLM's DeepSeek-V2/V3 are SupportsEagle; a multimodal wrapper (Kimi-K2.5,
+        # Qwen3-VL) is neither: its base model is its language model's, or that model itself (vLLM 0.15's Kimi-K2.5).
+        if hasattr(model, "get_language_model"):
+            base_model = lm if hasattr(lm := model.get_language_model(), "layers") else getattr(lm, "model", None)
+        else:
+            base_model = getattr(model, "model", None)
+        if not hasattr(base_model, "layers"):
             raise ValueError(
                 f"Model {type(model).__name__} does not support hidden state extraction"
             )
-
-        base_model = model.model  # type: ignore[attr-defined]
         base_model._extension = self  # noqa: SLF001
-        base_model.forward = types.MethodType(_patched_forward, base_model)
+        # The base model's own forward runs, with every argument its family passes its layers; hooks
+        # on the decoder layers capture their outputs.
+        _add_capture_hooks(self, base_model)
         logger.info(f"Hidden states capture setup complete for layers {layer_ids}")
 
     def _reset_capture(self):
'''


TOKENIZER_030 = r'''--- a/speculators/data_generation/vllm_hidden_states_generator.py
+++ b/speculators/data_generation/vllm_hidden_states_generator.py
@@ -81,7 +81,7 @@ tokenizer-trust-remote-code
         log.info(f"Initializing hidden states generator for {model_path}")
         log.info(f"Tensor parallel size: {tensor_parallel_size}")
 
-        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
+        self.tokenizer = AutoTokenizer.from_pretrained(model_path, trust_remote_code=True)
 
         config = AutoConfig.from_pretrained(model_path, trust_remote_code=True)
         if hasattr(config, "num_hidden_layers"):
'''


WORKER_040 = r'''--- a/speculators/data_generation/custom_worker.py
+++ b/speculators/data_generation/custom_worker.py
@@ -1,7 +1,6 @@ worker-capture-hooks
 """Custom worker extension for hidden states capture."""
 
 import logging
-import types
 from collections import defaultdict
 from itertools import islice
 
@@ -72,6 +71,60 @@ worker-capture-hooks
     return hidden_states
 
 
+def _layer_hidden_states(layer, output):
+    """What a decoder layer hands the next one: its hidden states plus the residual it carries."""
+    if isinstance(output, torch.Tensor):
+        return output.clone()
+    if isinstance(output, tuple) and len(output) == 2:
+        hidden_states, residual = output
+        return (hidden_states if residual is None else hidden_states + residual).clone()
+    raise RuntimeError(
+        f"{type(layer).__name__} returned {type(output).__name__}, not (hidden_states, residual): "
+        "its hidden states cannot be captured"
+    )
+
+
+def _add_capture_hooks(extension, base_model):
+    """Capture the target layers' outputs with forward hooks on the base model's decoder layers.
+
+    Hooks on the base model itself would never run: vLLM's support_torch_compile gives its class
+    a __call__ that calls forward directly when compilation is off (enforce_eager). So this
+    rank's first decoder layer starts each forward's capture and its last one ends it. Hooks of
+    an earlier setup are removed first.
+    """
+    for handle in getattr(extension, "_capture_hooks", ()):
+        handle.remove()
+    extension._capture_hooks = []
+    start, end = base_model.start_layer, base_model.end_layer
+    if start >= end:
+        return  # no decoder layer on this pipeline rank: nothing to capture
+    captured = {}
+
+    def start_forward(module, args):
+        captured.clear()
+
+    def capture(layer_id):
+        def hook(module, args, output):
+            # Only TP rank 0 captures: every rank computes the same states.
+            if get_tp_group().rank_in_group == 0:
+                captured[layer_id] = _layer_hidden_states(module, output)
+
+        return hook
+
+    def end_forward(module, args, output):
+        if get_pp_group().is_last_rank and get_tp_group().rank_in_group == 0 and captured:
+            extension._store_captured_states([captured[i] for i in sorted(captured)])
+        captured.clear()
+
+    layers = base_model.layers
+    hooks = [layers[start].register_forward_pre_hook(start_forward)]
+    targets = [i for i in sorted(extension._layer_ids) if start <= i < end]
+    hooks += [layers[i].register_forward_hook(capture(i)) for i in targets]
+    # After the capture hooks: torch runs a module's forward hooks in the order they were added.
+    hooks.append(layers[end - 1].register_forward_hook(end_forward))
+    extension._capture_hooks = hooks
+
+
 class HiddenStatesWorkerExtension:
     """Worker extension that adds hidden states capture functionality.
 
@@ -119,7 +172,7 @@ worker-language-model-stack
 
         # Vision-language models
         if hasattr(model, "get_language_model"):
-            base_model = model.get_language_model().model
+            base_model = lm if hasattr(lm := model.get_language_model(), "layers") else lm.model
         # Text models
         elif hasattr(model, "model") and hasattr(model.model, "layers"):
             base_model = model.model
@@ -132,7 +185,9 @@ worker-capture-hooks
             )
 
         base_model._extension = self  # noqa: SLF001
-        base_model.forward = types.MethodType(_patched_forward, base_model)
+        # The base model's own forward runs, with every argument its family passes its layers; hooks
+        # on the decoder layers capture their outputs.
+        _add_capture_hooks(self, base_model)
         logger.info(f"Hidden states capture setup complete for layers {layer_ids}")
 
     def _set_request_metadata(self, request_metadata: dict[str, int]):
'''


TOKENIZER_040 = r'''--- a/speculators/data_generation/vllm_hidden_states_generator.py
+++ b/speculators/data_generation/vllm_hidden_states_generator.py
@@ -87,7 +87,7 @@ tokenizer-trust-remote-code
         log.info(f"Initializing hidden states generator for {model_path}")
         log.info(f"Tensor parallel size: {tensor_parallel_size}")
 
-        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
+        self.tokenizer = AutoTokenizer.from_pretrained(model_path, trust_remote_code=True)
 
         config = AutoConfig.from_pretrained(model_path, trust_remote_code=True)
         if hasattr(config, "num_hidden_layers"):
'''


def _source(version: str, path: str) -> bytes:
    with zipfile.ZipFile(realdata.speculators_wheel(version)) as zf:
        return zf.read(path)


def _engine(*ids: str) -> Engine:
    pack = load_pack()
    # No time limit: a loaded machine must not fail a run the idempotence check compares.
    return Engine([pack.by_id(i) for i in ids], version=Version("0.16"), codemod_seconds=None)


@pytest.mark.slow  # the real wheels
@pytest.mark.parametrize(("version", "diff", "edits"), [
    pytest.param("0.3.0", WORKER_030, [
        ("worker-no-eagle3-gate", 102), ("worker-no-eagle3-gate", 107), ("worker-no-eagle3-gate", 9),
        ("worker-capture-hooks", 109), ("worker-capture-hooks", 67), ("worker-capture-hooks", 4)], id="0.3.0"),
    pytest.param("0.4.0", WORKER_040, [("worker-language-model-stack", 122),
        ("worker-capture-hooks", 135), ("worker-capture-hooks", 75), ("worker-capture-hooks", 4)], id="0.4.0"),
    pytest.param("0.4.0.1", WORKER_040, [("worker-language-model-stack", 122),
        ("worker-capture-hooks", 135), ("worker-capture-hooks", 75), ("worker-capture-hooks", 4)], id="0.4.0.1"),
])
def test_worker_rules_on_the_real_wheels(version: str, diff: str, edits: list[tuple[str, int]]) -> None:
    source = _source(version, WORKER)
    result = _engine(*WORKER_RULES).transform(source, WORKER)
    assert [(s.rule_id, s.line) for s in result.sites if s.action == "edited"] == edits
    # 0.4.0 finds its base model without the gate already; 0.3.0's gate rule writes the stack's form.
    assert [(s.rule_id, s.action) for s in result.sites if s.action != "edited"] == (
        [("worker-language-model-stack", "already")] if version == "0.3.0"
        else [("worker-no-eagle3-gate", "already")])
    assert file_diff(result) == diff
    compile(result.after, WORKER, "exec", dont_inherit=True)
    again = _engine(*WORKER_RULES).transform(result.after, WORKER)
    assert (again.status, again.after) == ("unchanged", result.after)


@pytest.mark.slow  # the real wheels
@pytest.mark.parametrize("version", realdata.SPECULATORS)
def test_a_comment_above_the_worker_class_stays_the_classs_own(version: str) -> None:
    """A hand edit above the class (the seed box's kind): the helpers go above it, the comment is
    written once, right above the class, as the user left it."""
    comment = b"# Kimi-K2.5: the worker hand-patched on the seed box\n"
    source = _source(version, WORKER).replace(b"\nclass ", b"\n" + comment + b"class ", 1)
    after = _engine(*WORKER_RULES).transform(source, WORKER).after
    assert after.count(comment) == 1
    assert comment + b"class HiddenStatesWorkerExtension" in after
    assert after.index(b"def _add_capture_hooks") < after.index(comment)


@pytest.mark.slow  # the real wheels
@pytest.mark.parametrize(("version", "rules"), [
    pytest.param("0.3.0", ["worker-request-tracking", "worker-request-tracking", "worker-no-eagle3-gate",
                           "worker-no-eagle3-gate", "worker-no-eagle3-gate", "worker-capture-hooks",
                           "worker-capture-hooks", "worker-capture-hooks"], id="0.3.0"),
    pytest.param("0.4.0", ["worker-language-model-stack", *["worker-capture-hooks"] * 3], id="0.4.0"),
])
def test_the_default_selection_edits_the_worker_in_file_order(version: str, rules: list[str]) -> None:
    result = Engine(load_pack().selected().rules, version=Version("0.16")).transform(_source(version, WORKER), WORKER)
    assert [s.rule_id for s in result.sites if s.action == "edited"] == rules
    after = result.after.decode()
    # The binding is gone, _patched_forward stays, unbound and as released: no edit to code that
    # never runs (0.3.0's get_input_embeddings there is not renamed; 0.4.0 calls embed_input_ids).
    assert "base_model.forward =" not in after and "def _patched_forward(" in after
    embed = [(s.line, s.action, s.by) for s in result.sites if s.rule_id == "llama-model-embed-input-ids"]
    assert embed == ([(30, "not-needed", "worker-capture-hooks")] if version == "0.3.0" else [(17, "already", "")])
    assert (b"else self.get_input_embeddings(input_ids)" in result.after) is (version == "0.3.0")
    assert after.count("_add_capture_hooks(self, base_model)") == 1
    compile(result.after, WORKER, "exec", dont_inherit=True)
    # Planned again (what --check and a rehearsal of the patched files do): nothing more to write.
    again = Engine(load_pack().selected().rules, version=Version("0.16")).transform(result.after, WORKER)
    assert (again.status, again.after) == ("unchanged", result.after)


@pytest.mark.slow  # the real wheels
@pytest.mark.parametrize(("version", "diff"), [
    pytest.param("0.3.0", TOKENIZER_030, id="0.3.0"),
    pytest.param("0.4.0", TOKENIZER_040, id="0.4.0"),
])
def test_the_tokenizer_is_trusted_only_with_the_option(version: str, diff: str) -> None:
    pack = load_pack()
    assert "tokenizer-trust-remote-code" not in [r.id for r in pack.selected().rules]
    opted = pack.selected(options=frozenset({"trust-remote-code"}))
    assert "tokenizer-trust-remote-code" in [r.id for r in opted.rules]
    result = _engine("tokenizer-trust-remote-code").transform(_source(version, GENERATOR), GENERATOR)
    assert file_diff(result) == diff


class _Handle:
    def __init__(self, hooks: list[Any], hook: Any):
        self.hooks, self.hook = hooks, hook

    def remove(self) -> None:
        self.hooks.remove(self.hook)


class _Layer:
    """Records what is registered on it; no torch semantics are claimed (the real-vLLM rehearsal runs them)."""

    def __init__(self) -> None:
        self.pre: list[Any] = []
        self.post: list[Any] = []

    def register_forward_pre_hook(self, hook: Any) -> _Handle:
        self.pre.append(hook)
        return _Handle(self.pre, hook)

    def register_forward_hook(self, hook: Any) -> _Handle:
        self.post.append(hook)
        return _Handle(self.post, hook)


class _Extension:
    def __init__(self, layer_ids: set[int]):
        self._layer_ids = frozenset(layer_ids)
        self.stored: list[list[Any]] = []

    def _store_captured_states(self, states: list[Any]) -> None:
        self.stored.append(states)


@pytest.fixture
def patched(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The namespace of the hooks rule's own example, patched (the helpers it adds are the ones the
    real worker gets: tests above), torch stood in by a bare module and the vLLM parallel groups it
    imports from vllm.distributed by a rank that is TP rank 0 and the last PP rank."""
    rule = load_pack().by_id("worker-capture-hooks")
    result = Engine([rule], version=Version("0.16"), codemod_seconds=None).transform(
        rule.examples[0].before.encode(), WORKER)
    assert result.status == "changed" and b"def _add_capture_hooks(" in result.after
    torch = types.ModuleType("torch")
    torch.Tensor = type("Tensor", (), {})  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torch", torch)
    rank = types.SimpleNamespace(rank_in_group=0, is_last_rank=True)
    namespace: dict[str, Any] = {"__name__": "patched_custom_worker", "get_pp_group": lambda: rank,
                                 "get_tp_group": lambda: rank}
    exec(compile(result.after, WORKER, "exec", dont_inherit=True), namespace)  # noqa: S102
    return namespace


def test_hooks_sit_on_this_ranks_layers_and_are_not_stacked(patched: dict[str, Any]) -> None:
    layers = [_Layer() for _ in range(6)]
    base = types.SimpleNamespace(layers=layers, start_layer=2, end_layer=5)
    ext = _Extension({1, 4, 3})  # 1 is on another pipeline rank
    for _ in range(2):  # set up twice: the first setup's hooks are removed
        patched["_add_capture_hooks"](ext, base)
    assert [(len(layer.pre), len(layer.post)) for layer in layers] == [(0, 0), (0, 0), (1, 0), (0, 1), (0, 2), (0, 0)]
    assert len(ext._capture_hooks) == 4  # type: ignore[attr-defined]
    empty = types.SimpleNamespace(layers=layers, start_layer=3, end_layer=3)
    patched["_add_capture_hooks"](ext, empty)
    assert [(len(layer.pre), len(layer.post)) for layer in layers] == [(0, 0)] * 6


class _State:
    def __init__(self, name: str):
        self.name = name

    def __add__(self, other: _State) -> _State:
        return _State(f"{self.name}+{other.name}")

    def clone(self) -> _State:
        return _State(f"clone({self.name})")


def test_one_forward_stores_the_target_layers_in_layer_order(patched: dict[str, Any]) -> None:
    layers = [_Layer() for _ in range(4)]
    base = types.SimpleNamespace(layers=layers, start_layer=0, end_layer=4)
    ext = _Extension({3, 1})
    patched["_add_capture_hooks"](ext, base)
    for i, layer in enumerate(layers):  # the order a forward calls them
        for hook in layer.pre:
            hook(layer, ())
        for hook in layer.post:
            hook(layer, (), (_State(f"h{i}"), _State(f"r{i}") if i != 1 else None))
    assert [[s.name for s in states] for states in ext.stored] == [["clone(h1)", "clone(h3+r3)"]]
    with pytest.raises(RuntimeError, match=r"^_Layer returned tuple, not \(hidden_states, residual\): its hidden "
                                           r"states cannot be captured$"):
        layers[1].post[0](layers[1], (), (1, 2, 3))

"""Capture hidden states from the model's own forward, with hooks on its decoder layers.

speculators (0.3.0, 0.4.0, 0.4.0.1) replaces the vLLM base model's forward with its own
`_patched_forward`, a copy of a Llama forward. A family whose forward does more is silently
wrong or fails: DeepseekV2Model passes `llama_4_scaling` to every decoder layer (dropped: wrong
states for Mistral-Large-3-style configs), Qwen3-VL's inner model takes `deepstack_input_embeds`
(0.3.0: TypeError; 0.4.0 swallows and drops it). The base model's forward is left as vLLM wrote
it; forward hooks on its decoder layers capture `hidden_states + residual` after each target
layer, as `_patched_forward` did, and hand them to `_store_captured_states` once per forward on
the last pipeline rank and tensor-parallel rank 0, in layer order.

The hooks sit on the decoder layers, not on the base model: vLLM's `support_torch_compile`
(LlamaModel, DeepseekV2Model, Qwen3MoeModel, GptOssModel, Qwen3LLMModel, ...) replaces the class's
`__call__` with one that calls `self.forward` directly when compilation is off, which is what
speculators' `enforce_eager=True` gives, so a base model's own hooks never run. A decoder layer is
a plain module called through `nn.Module.__call__`. This rank's first layer starts a forward's
capture (a pre-hook), its last layer ends it.

`_patched_forward` stays in the file, no longer bound (the smallest diff; what imports it from
elsewhere, if anything, still finds it), and the codemod says so (`unbinds`): a later rule for its
body (llama-model-embed-input-ids) is reported as not needed instead of editing code that never
runs. No other module of speculators (0.3.0, 0.4.0, 0.4.0.1) names it. The `types` import goes
when nothing else uses it. Acts only where the binding is exactly speculators'.
"""

from __future__ import annotations

import libcst as cst
from vllm_shim_patch.rewrite.scoped import ScopedTransform, drop_unused_import, same_code, statements

CLASS = "HiddenStatesWorkerExtension"
SETUP = "_setup_hidden_states_capture"
BINDING = "base_model.forward = types.MethodType(_patched_forward, base_model)"
HELPER = "_add_capture_hooks"

CALL = f'''
# The base model's own forward runs, with every argument its family passes its layers; hooks
# on the decoder layers capture their outputs.
{HELPER}(self, base_model)
'''

HELPERS = f'''
def _layer_hidden_states(layer, output):
    """What a decoder layer hands the next one: its hidden states plus the residual it carries."""
    if isinstance(output, torch.Tensor):
        return output.clone()
    if isinstance(output, tuple) and len(output) == 2:
        hidden_states, residual = output
        return (hidden_states if residual is None else hidden_states + residual).clone()
    raise RuntimeError(
        f"{{type(layer).__name__}} returned {{type(output).__name__}}, not (hidden_states, residual): "
        "its hidden states cannot be captured"
    )


def {HELPER}(extension, base_model):
    """Capture the target layers' outputs with forward hooks on the base model's decoder layers.

    Hooks on the base model itself would never run: vLLM's support_torch_compile gives its class
    a __call__ that calls forward directly when compilation is off (enforce_eager). So this
    rank's first decoder layer starts each forward's capture and its last one ends it. Hooks of
    an earlier setup are removed first.
    """
    for handle in getattr(extension, "_capture_hooks", ()):
        handle.remove()
    extension._capture_hooks = []
    start, end = base_model.start_layer, base_model.end_layer
    if start >= end:
        return  # no decoder layer on this pipeline rank: nothing to capture
    captured = {{}}

    def start_forward(module, args):
        captured.clear()

    def capture(layer_id):
        def hook(module, args, output):
            # Only TP rank 0 captures: every rank computes the same states.
            if get_tp_group().rank_in_group == 0:
                captured[layer_id] = _layer_hidden_states(module, output)

        return hook

    def end_forward(module, args, output):
        if get_pp_group().is_last_rank and get_tp_group().rank_in_group == 0 and captured:
            extension._store_captured_states([captured[i] for i in sorted(captured)])
        captured.clear()

    layers = base_model.layers
    hooks = [layers[start].register_forward_pre_hook(start_forward)]
    targets = [i for i in sorted(extension._layer_ids) if start <= i < end]
    hooks += [layers[i].register_forward_hook(capture(i)) for i in targets]
    # After the capture hooks: torch runs a module's forward hooks in the order they were added.
    hooks.append(layers[end - 1].register_forward_hook(end_forward))
    extension._capture_hooks = hooks
'''


def _defs(body: list[cst.BaseStatement] | tuple[cst.BaseStatement, ...]) -> dict[str, tuple[int, cst.CSTNode]]:
    return {s.name.value: (i, s) for i, s in enumerate(body) if isinstance(s, (cst.ClassDef, cst.FunctionDef))}


class Codemod(ScopedTransform):
    region_only = True  # its region is the module: everything it changes is found from there

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        top = _defs(updated_node.body)
        if HELPER in top:
            if "_patched_forward" in top:
                self.unbinds("_patched_forward")  # hooked already: its binding is gone as well
            return updated_node
        cls = top.get(CLASS)
        if cls is None or not isinstance(cls[1], cst.ClassDef) or not isinstance(cls[1].body, cst.IndentedBlock):
            self.needs_human(original_node, f"no class {CLASS}: capture from the model's own forward by hand")
            return updated_node
        ci, klass = cls
        assert isinstance(klass, cst.ClassDef) and isinstance(klass.body, cst.IndentedBlock)
        methods = _defs(klass.body.body)
        setup = methods.get(SETUP)
        original_class = original_node.body[ci]
        if setup is None or "_store_captured_states" not in methods or "_patched_forward" not in top:
            self.needs_human(original_class, f"{CLASS} has no {SETUP} binding _patched_forward beside "
                                             f"_store_captured_states: capture from the model's own forward by hand")
            return updated_node
        mi, method = setup
        assert isinstance(method, cst.FunctionDef) and isinstance(method.body, cst.IndentedBlock)
        body = list(method.body.body)
        at = next((i for i, s in enumerate(body) if same_code(s, BINDING)), None)
        if at is None:
            self.needs_human(original_class.body.body[mi],  # type: ignore[attr-defined]
                             f"{SETUP} does not bind _patched_forward as speculators does: capture from the "
                             f"model's own forward by hand")
            return updated_node
        call = statements(CALL, self.module)
        call[0] = call[0].with_changes(leading_lines=[*body[at].leading_lines, *call[0].leading_lines])
        body[at: at + 1] = call
        new_method = method.with_changes(body=method.body.with_changes(body=body))
        new_class = klass.with_changes(body=klass.body.with_changes(
            body=[*klass.body.body[:mi], new_method, *klass.body.body[mi + 1:]]))
        helpers = statements(HELPERS, self.module)
        # The helpers take the blank lines that separate the class from what is above it; a comment
        # above the class (a hand edit, say) stays the class's own, written once.
        blank = []
        for line in klass.leading_lines:
            if line.comment is not None:
                break
            blank.append(line)
        helpers[0] = helpers[0].with_changes(leading_lines=blank or [cst.EmptyLine(), cst.EmptyLine()])
        module_body = list(updated_node.body)
        module_body[ci: ci + 1] = [*helpers, new_class]
        original_method = original_class.body.body[mi]  # type: ignore[attr-defined]
        self.edited(original_method.body.body[at], "capture with forward hooks on the decoder layers; "
                                                   "the model's own forward runs")
        # The class's own line: the hunk that adds the hooks ends there.
        self.edited(original_class.name, "add the capture hooks (_add_capture_hooks) before the class")  # type: ignore[attr-defined]
        self.unbinds("_patched_forward")
        return drop_unused_import(self, original_node, updated_node.with_changes(body=module_body), "types", None,
                                  "drop the import of types, used by the binding alone")

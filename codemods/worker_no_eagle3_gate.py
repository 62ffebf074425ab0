"""Find the worker's base model as speculators 0.4.0 does, without the Eagle3 gate (speculators 0.3.0).

speculators 0.3.0's `_setup_hidden_states_capture` refuses every model that is not
`SupportsEagle3` and then takes `model.model`. vLLM loads families that are `SupportsEagle` only
(DeepseekV2ForCausalLM, so DeepSeek-V3 and Kimi-K2) and multimodal wrappers that are neither
(KimiK25ForConditionalGeneration), whose base model sits under `get_language_model()`
(Qwen3-VL's wrapper has no `model` at all), or is the language model itself (vLLM 0.15's
Kimi-K2.5: a DeepseekV2Model). The worker needs only a base model with `layers`: the gate goes,
the base model is found as 0.4.0 finds it (with `worker-language-model-stack`'s fix), and a model
without one fails with 0.3.0's own message. The gate's import goes when nothing else uses it.

Acts only where the gate and the `model.model` line are exactly speculators 0.3.0's.
"""

from __future__ import annotations

import libcst as cst
from vllm_shim_patch.rewrite.scoped import ScopedTransform, drop_unused_import, same_code, statements

GATE = '''
if not supports_eagle3(model):
    raise ValueError(
        f"Model {type(model).__name__} does not support hidden state extraction"
    )
'''

BASE_MODEL = "base_model = model.model"

FOUND = '''
# Not only SupportsEagle3 models: vLLM's DeepSeek-V2/V3 are SupportsEagle; a multimodal wrapper (Kimi-K2.5,
# Qwen3-VL) is neither: its base model is its language model's, or that model itself (vLLM 0.15's Kimi-K2.5).
if hasattr(model, "get_language_model"):
    base_model = lm if hasattr(lm := model.get_language_model(), "layers") else getattr(lm, "model", None)
else:
    base_model = getattr(model, "model", None)
if not hasattr(base_model, "layers"):
    raise ValueError(
        f"Model {type(model).__name__} does not support hidden state extraction"
    )
'''

INTERFACES = "vllm.model_executor.models.interfaces"


class Codemod(ScopedTransform):
    region_only = True  # acts on its region's own node; the import through leave_Module

    def __init__(self, *args: object, **kwargs: object):
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.removed = False

    def leave_FunctionDef(self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef) -> cst.FunctionDef:
        if not self.at_scope or not isinstance(updated_node.body, cst.IndentedBlock):
            return updated_node
        body = list(updated_node.body.body)
        gate = next((i for i, s in enumerate(body) if same_code(s, GATE)), None)
        if gate is None:
            if not any("supports_eagle3" in cst.Module([]).code_for_node(s) for s in body):
                return updated_node  # no gate (speculators 0.4.0 finds the base model itself)
            self.needs_human(original_node, "the supports_eagle3 gate differs from speculators 0.3.0's: "
                                            "find the base model without it by hand")
            return updated_node
        if gate + 1 >= len(body) or not same_code(body[gate + 1], BASE_MODEL):
            self.needs_human(original_node.body.body[gate], "the base model is not taken as speculators 0.3.0 "
                                                            "takes it (model.model after the gate): change by hand")
            return updated_node
        found = statements(FOUND, self.module)
        found[0] = found[0].with_changes(leading_lines=[*body[gate].leading_lines, *found[0].leading_lines])
        body[gate: gate + 2] = found
        self.edited(original_node.body.body[gate], "accept every model with a base model with layers, "
                                                   "not only SupportsEagle3 ones")
        self.edited(original_node.body.body[gate + 1], "find a multimodal wrapper's base model through "
                                                       "get_language_model()")
        self.removed = True
        return updated_node.with_changes(body=updated_node.body.with_changes(body=body))

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        if not self.removed:
            return updated_node
        return drop_unused_import(self, original_node, updated_node, INTERFACES, "supports_eagle3",
                                  "drop the import of supports_eagle3, used by the gate alone")

"""Take a multimodal wrapper's language model itself as the base model where it is the decoder
stack (speculators 0.4.0, 0.4.0.1).

speculators 0.4.0's `_setup_hidden_states_capture` takes `model.get_language_model().model` for
every model with a language model. vLLM 0.15's KimiK25ForConditionalGeneration keeps the decoder
stack itself there (`language_model` is a DeepseekV2Model, with `layers` and no `model`; from 0.16
it is a DeepseekV3ForCausalLM with `.model`), so the worker fails: "'DeepseekV2Model' object has no
attribute 'model'". The base model is the language model when it has `layers`, else its `model`,
on one line (the lines below keep their numbers).

Acts only on exactly speculators 0.4.0's line.
"""

from __future__ import annotations

import libcst as cst
from vllm_shim_patch.rewrite.scoped import ScopedTransform, same_code, statements

TAKEN = "base_model = model.get_language_model().model"
STACK = 'base_model = lm if hasattr(lm := model.get_language_model(), "layers") else lm.model'


class Codemod(ScopedTransform):
    region_only = True  # acts on its region's own statements

    def leave_SimpleStatementLine(self, original_node: cst.SimpleStatementLine,
                                  updated_node: cst.SimpleStatementLine) -> cst.BaseStatement:
        if not self.in_scope or not same_code(updated_node, TAKEN):
            return updated_node
        self.edited(original_node, "take the language model itself where it is the decoder stack "
                                   "(vLLM 0.15's Kimi-K2.5)")
        new = statements(STACK, self.module)[0]
        return new.with_changes(leading_lines=updated_node.leading_lines) if isinstance(
            new, cst.SimpleStatementLine) else new

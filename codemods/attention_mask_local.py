"""speculators' EAGLE model imports a helper transformers 5.24 removed: keep it importable.

`speculators/models/eagle.py` (0.3.0, 0.4.0, 0.4.0.1) imports
`_prepare_4d_causal_attention_mask` from `transformers.modeling_attn_mask_utils` at module level,
and `import speculators` imports the models: on transformers 5.24.0, which has no such module
(vLLM 0.19.1 and 0.24-0.27 resolve it), nothing of speculators imports. The import is kept where
it works; where it fails, the same name is defined as transformers 4.57.6 computes it on the one
path speculators takes (`EagleSpeculator._prepare_decoder_inputs` passes a 2-D padding mask):
`AttentionMaskConverter(is_causal=True, sliding_window=...).to_4d(...)`, whose `_make_causal_mask`
and `_expand_mask` are re-stated line for line. A 4-D or absent mask, which speculators never
passes, raises rather than guess. Tested against transformers 4.57.6's own function.

Acts on that one `from ... import` statement at module level.
"""

from __future__ import annotations

import libcst as cst

from vllm_shim_patch.rewrite.scoped import ScopedTransform, same_code, statements

IMPORT = "from transformers.modeling_attn_mask_utils import _prepare_4d_causal_attention_mask"

REPLACEMENT = '''
try:
    from transformers.modeling_attn_mask_utils import _prepare_4d_causal_attention_mask
except ImportError:  # transformers 5.24 removed the module: its 2-D causal path, as 4.57.6 has it

    def _prepare_4d_causal_attention_mask(
        attention_mask, input_shape, inputs_embeds, past_key_values_length, sliding_window=None
    ):
        if attention_mask is None or attention_mask.dim() != 2:
            raise NotImplementedError("only a 2-D attention mask (what speculators passes)")
        dtype, device = inputs_embeds.dtype, attention_mask.device
        bsz, tgt_len = attention_mask.shape[0], input_shape[-1]
        key_value_length = tgt_len + past_key_values_length
        lowest = torch.finfo(dtype).min
        causal = None
        if tgt_len > 1 or sliding_window is not None:
            mask = torch.full((tgt_len, tgt_len), lowest, device=device)
            cond = torch.arange(mask.size(-1), device=device)
            mask.masked_fill_(cond < (cond + 1).view(mask.size(-1), 1), 0)
            mask = mask.to(dtype)
            if past_key_values_length > 0:
                zeros = torch.zeros(tgt_len, past_key_values_length, dtype=dtype, device=device)
                mask = torch.cat([zeros, mask], dim=-1)
            if sliding_window is not None:
                diagonal = past_key_values_length - sliding_window - 1
                context = torch.tril(torch.ones_like(mask, dtype=torch.bool), diagonal=diagonal)
                mask.masked_fill_(context, lowest)
            causal = mask[None, None, :, :].expand(bsz, 1, tgt_len, key_value_length)
        src_len = attention_mask.shape[1]
        expanded = attention_mask[:, None, None, :].expand(bsz, 1, tgt_len, src_len).to(dtype)
        inverted = torch.tensor(1.0, dtype=dtype) - expanded
        expanded = inverted.masked_fill(inverted.to(torch.bool), lowest).to(device)
        if causal is not None:
            expanded = causal.masked_fill(expanded.bool(), lowest)
        return expanded
'''


class Codemod(ScopedTransform):
    region_only = True  # its region is the module: the one import statement at its top level

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        body = list(updated_node.body)
        at = next((i for i, s in enumerate(body) if same_code(s, IMPORT)), None)
        if at is None:
            return updated_node
        if "import torch" not in updated_node.code:
            self.needs_human(original_node.body[at], "the module does not import torch, which the fallback needs")
            return updated_node
        inserted = statements(REPLACEMENT, self.module)
        first = inserted[0]
        inserted[0] = first.with_changes(leading_lines=[*body[at].leading_lines, *first.leading_lines])
        self.edited(original_node.body[at], "define _prepare_4d_causal_attention_mask where transformers has none")
        return updated_node.with_changes(body=[*body[:at], *inserted, *body[at + 1:]])

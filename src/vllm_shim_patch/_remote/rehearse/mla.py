"""The multi-head latent attention stand-in (DeepSeek-V2/V3, Kimi-K2): vLLM's MLAAttention layer
runs; the kernel call is stood in by the arithmetic of MLA's prefill path over the attention
backend's per-request history (`attention`), at the seam the installed vLLM has:

  forward_impl  MLAAttention (vllm.model_executor.layers.attention.mla_attention, vLLM 0.16+)
                hands the kernels to its forward_impl: replaced by `mla_forward_impl`
  impl          MLAAttention (vllm.attention.layer, 0.12-0.15) hands them to its impl's forward:
                StandInMLAImpl.forward, from the kv_b_proj and sizes MLAAttention gives the impl

Its impl answers what MLAAttention asks of any impl outside the kernel call with vLLM's own
members (`install`); the prefill backend MLAAttention builds (0.21+) is `mla_prefill`'s. The
self-checks are `mla_checks`'.
"""

from typing import Any

from .attention import StandInAttentionImpl, extend, query_blocks

MLA_BACKEND_NAME = "TRITON_MLA"
_ORIGINAL: dict[str, Any] = {}


class StandInMLAImpl(StandInAttentionImpl):
    """What MLAAttention builds as its impl: it keeps the sizes (and, for the `impl` seam, the
    kv_b_proj MLAAttention hands it); the arithmetic is `attend`."""

    # What MLAAttention reads off any impl besides the kernel call (vLLM 0.26+: is_sparse, 0.28+:
    # lse_base_on_e): a dense MLA impl, at vLLM's AttentionImplBase defaults (checked).
    is_sparse = False
    supports_dense_mha_prefill = True
    lse_base_on_e = True

    def __init__(self, num_heads, head_size, scale, num_kv_heads=None, alibi_slopes=None,
                 sliding_window=None, kv_cache_dtype="auto", logits_soft_cap=None,
                 attn_type="decoder", kv_sharing_target_layer_name=None, **mla):
        StandInAttentionImpl.__init__(self, num_heads, head_size, scale, num_kv_heads)
        self.mla = mla

    def forward(self, layer, hidden_states_or_cq, kv_c_normed, k_pe, kv_cache, attn_metadata,
                output=None, output_scale=None, output_block_scale=None):
        """MLAAttentionImpl.forward (the `impl` seam, vLLM 0.12-0.15)."""
        if output_scale is not None or output_block_scale is not None:
            from .answer import CannotRehearse

            raise CannotRehearse("the stand-in StandInMLAImpl.forward does not quantize its output")
        m = self.mla
        return attend(hidden_states_or_cq, kv_c_normed, k_pe, attn_metadata, output, layer.layer_name,
                      (self.num_heads, m["qk_nope_head_dim"], m["qk_rope_head_dim"], m["v_head_dim"]),
                      m["kv_b_proj"], self.scale)


def backend(attention_backend):
    """The MLA backend: the stand-in attention backend, named as vLLM's Triton MLA one."""

    class StandInMLABackend(attention_backend):  # type: ignore[valid-type, misc]  # vLLM's class, found at run time
        accept_output_buffer = False  # MLAAttention.forward then returns the stand-in's result

        @staticmethod
        def get_name():
            return MLA_BACKEND_NAME

        @staticmethod
        def get_impl_cls():
            return StandInMLAImpl

        @classmethod
        def is_mla(cls):
            return True

    return StandInMLABackend


def mla_forward_impl(self, q, k_c_normed, k_pe, kv_cache, attn_metadata, output=None, **features):
    """MLAAttention.forward_impl on CPU (the `forward_impl` seam), from the layer's own kv_b_proj.

    `features`: the real method's later parameters (output quantization, decode context
    parallelism: output_scale, quant_group_size, q_dcp_replicated, ...), each off by default; the
    stand-in implements none of them, so one that is on stops the rehearsal instead of being
    ignored."""
    on = sorted(name for name, value in features.items() if value is not None)
    if on:
        from .answer import CannotRehearse

        raise CannotRehearse(f"stand-in mla_forward_impl does not implement MLAAttention.forward_impl's {on}")
    sizes = (self.num_heads, self.qk_nope_head_dim, self.qk_rope_head_dim, self.v_head_dim)
    # Model Runner V2's metadata (its paged KV cache) attends itself, through the same arithmetic.
    paged = getattr(attn_metadata, "attend_mla", None)
    if paged is not None:
        return paged(q, kv_cache, output, sizes, self.kv_b_proj, self.impl.scale)
    return attend(q, k_c_normed, k_pe, attn_metadata, output, self.layer_name, sizes, self.kv_b_proj,
                  self.impl.scale)


def attend(q, k_c_normed, k_pe, attn_metadata, output, layer_name, sizes, kv_b_proj, scale):
    """MLA's prefill arithmetic: the latent KV history per request, keys and values expanded by
    kv_b_proj, causal attention. `sizes`: (heads, nope head size, rope head size, v head size)."""
    import torch

    heads, nope, rope, v_dim = sizes
    n_tok = q.shape[0]
    out = torch.empty(n_tok, heads * v_dim, dtype=q.dtype) if output is None else output
    if attn_metadata is None:
        return out.zero_()
    q = q.view(n_tok, heads, nope + rope)
    k_pe = k_pe.reshape(n_tok, rope)
    flat = out.view(n_tok, heads * v_dim)
    for rid, row, start, n in attn_metadata.segments:
        latent, pe = extend(attn_metadata, layer_name, rid, start, (k_c_normed[row:row + n], k_pe[row:row + n]))
        attend_request(q, latent, pe, (row, start, n), flat, sizes, kv_b_proj, scale)
    return out


def attend_request(q, latent, pe, where, flat, sizes, kv_b_proj, scale):
    """One request's query rows (`where`: first row, first position, rows; q viewed [tokens,
    heads, nope + rope]) over its whole latent history and rope keys, into `flat` [tokens, heads *
    v head size]."""
    import torch

    heads, nope, rope, v_dim = sizes
    row, start, n = where
    kv = kv_b_proj(latent)[0].view(latent.shape[0], heads, nope + v_dim)
    k_nope, v = kv.split([nope, v_dim], dim=-1)
    k = torch.cat([k_nope, pe.reshape(-1, rope).unsqueeze(1).expand(-1, heads, rope)], dim=-1).double()
    v = v.double()
    for first, rows in query_blocks(n, heads, start):
        at, top = start + first, start + first + rows
        scores = torch.einsum("qhd,khd->hqk", q[row + first:row + first + rows].double(), k[:top]) * scale
        q_pos = torch.arange(at, top).unsqueeze(1)
        scores = scores.masked_fill(torch.arange(top).unsqueeze(0) > q_pos, float("-inf"))
        o = torch.einsum("hqk,khd->qhd", torch.softmax(scores, dim=-1), v[:top])
        flat[row + first:row + first + rows] = o.reshape(rows, heads * v_dim).to(flat.dtype)


def layer():
    """vLLM's MLAAttention where its forward_impl is the seam (0.16 and later), else None."""
    try:
        from vllm.model_executor.layers.attention import mla_attention
    except ImportError:
        return None
    found = getattr(mla_attention, "MLAAttention", None)
    return found if found is not None and hasattr(found, "forward_impl") else None


def impl_layer():
    """vLLM's MLAAttention where it hands the kernels to its impl's forward (vllm.attention.layer,
    0.12-0.15: no forward_impl), else None."""
    try:
        from vllm.attention import layer as attention_layer
    except ImportError:
        return None
    found = getattr(attention_layer, "MLAAttention", None)
    return found if found is not None and not hasattr(found, "forward_impl") and impl_base() is not None else None


def impl_base():
    """vLLM's MLAAttentionImpl, where it lives (None: nowhere)."""
    import importlib

    for name in ("vllm.v1.attention.backend", "vllm.attention.backends.abstract"):
        try:
            found = getattr(importlib.import_module(name), "MLAAttentionImpl", None)
        except ImportError:
            continue
        if found is not None:
            return found
    return None


def install():
    """The seam this vLLM has made the stand-in's; the seam's name, or None."""
    from . import mla_prefill

    base = impl_base()
    if base is not None and "do_kv_cache_update" in vars(base):
        # vLLM 0.17+: MLAAttention.forward stores the latent KV through the impl first. vLLM's own
        # method: it returns at once on the layer's empty KV tensor (the runner allocates none).
        StandInMLAImpl.do_kv_cache_update = vars(base)["do_kv_cache_update"]  # type: ignore[attr-defined]  # where vLLM has it
    mla_layer = layer()
    if mla_layer is not None:
        _ORIGINAL.setdefault("forward_impl", mla_layer.forward_impl)
        mla_layer.forward_impl = mla_forward_impl
        mla_prefill.install()
        return "forward_impl"
    return "impl" if impl_layer() is not None else None


def check_installed(seam):
    """A model with MLA asks for a backend: refused where the stand-in has no seam."""
    if seam is None:
        from .answer import CannotRehearse

        raise CannotRehearse("the MLA stand-in replaces MLAAttention.forward_impl (vLLM 0.16+) or the MLA impl's "
                             "forward (MLAAttention in vllm.attention.layer, 0.12-0.15), which this vLLM has neither of")

"""The multi-head latent attention stand-in (DeepSeek-V2/V3, Kimi-K2): MLAAttention's own layer
runs, its forward_impl (the kernel call) is stood in by the arithmetic of MLA's prefill path over
the attention backend's per-request history (`attention`), and its impl is a CPU one.
"""

import inspect

from .attention import StandInAttentionImpl, extend

MLA_BACKEND_NAME = "TRITON_MLA"
_ORIGINAL = {}


class StandInMLAImpl(StandInAttentionImpl):
    """What MLAAttention builds as its impl: it keeps the sizes; the layer's forward_impl
    (stood in below) does the arithmetic from the layer's own kv_b_proj."""

    def __init__(self, num_heads, head_size, scale, num_kv_heads=None, alibi_slopes=None,
                 sliding_window=None, kv_cache_dtype="auto", logits_soft_cap=None,
                 attn_type="decoder", kv_sharing_target_layer_name=None, **mla):
        StandInAttentionImpl.__init__(self, num_heads, head_size, scale, num_kv_heads)
        self.mla = mla


def backend(attention_backend):
    """The MLA backend: the stand-in attention backend, named as vLLM's Triton MLA one."""

    class StandInMLABackend(attention_backend):
        accept_output_buffer = False  # MLAAttention.forward then returns forward_impl's result

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
    """MLAAttention.forward_impl on CPU: the latent KV history per request, keys and values
    expanded by the layer's own kv_b_proj, causal attention (the arithmetic of MLA's prefill path).

    `features`: the real method's later parameters (output quantization, decode context
    parallelism: output_scale, quant_group_size, q_dcp_replicated, ...), each off by default; the
    stand-in implements none of them, so one that is on stops the rehearsal instead of being
    ignored."""
    import torch

    on = sorted(name for name, value in features.items() if value is not None)
    if on:
        from .answer import CannotRehearse

        raise CannotRehearse(f"stand-in mla_forward_impl does not implement MLAAttention.forward_impl's {on}")

    n_tok, heads = q.shape[0], self.num_heads
    nope, rope, v_dim = self.qk_nope_head_dim, self.qk_rope_head_dim, self.v_head_dim
    out = torch.empty(n_tok, heads * v_dim, dtype=q.dtype) if output is None else output
    if attn_metadata is None:
        return out.zero_()
    q = q.view(n_tok, heads, nope + rope)
    k_pe = k_pe.reshape(n_tok, rope)
    for rid, row, start, n in attn_metadata.segments:
        latent, pe = extend(attn_metadata, self.layer_name, rid, start, (k_c_normed[row:row + n], k_pe[row:row + n]))
        kv = self.kv_b_proj(latent)[0].view(latent.shape[0], heads, nope + v_dim)
        k_nope, v = kv.split([nope, v_dim], dim=-1)
        k = torch.cat([k_nope, pe.unsqueeze(1).expand(-1, heads, rope)], dim=-1).double()
        scores = torch.einsum("qhd,khd->hqk", q[row:row + n].double(), k) * self.impl.scale
        q_pos = torch.arange(start, start + n).unsqueeze(1)
        scores = scores.masked_fill(torch.arange(k.shape[0]).unsqueeze(0) > q_pos, float("-inf"))
        o = torch.einsum("hqk,khd->qhd", torch.softmax(scores, dim=-1), v.double())
        out[row:row + n] = o.reshape(n, heads * v_dim).to(out.dtype)
    return out


def layer():
    """vLLM's MLAAttention where its forward_impl is the seam the MLA stand-in replaces (0.16 and
    later); None before, where MLAAttention lives in vllm.attention.layer without a forward_impl
    (0.15.1 has an mla_attention module, for the backends' impls only)."""
    try:
        from vllm.model_executor.layers.attention import mla_attention
    except ImportError:
        return None
    found = getattr(mla_attention, "MLAAttention", None)
    return found if found is not None and hasattr(found, "forward_impl") else None


def install():
    """MLAAttention.forward_impl replaced where this vLLM has it; the layer class, or None."""
    mla_layer = layer()
    if mla_layer is not None:
        _ORIGINAL.setdefault("forward_impl", mla_layer.forward_impl)
        mla_layer.forward_impl = mla_forward_impl
    return mla_layer


def check_installed(mla_layer):
    """A model with MLA asks for a backend: refused where the stand-in has no seam."""
    if mla_layer is None:
        from .answer import CannotRehearse

        raise CannotRehearse("the MLA stand-in replaces MLAAttention.forward_impl "
                             "(vllm.model_executor.layers.attention.mla_attention), which this vLLM does not have")


def self_check(run):
    mla_layer = layer()
    if mla_layer is None:
        return  # no MLA stand-in installed: a model with MLA is refused ("cannot rehearse")
    real = _ORIGINAL.get("forward_impl")
    if real is not None:
        # The parameters the stand-in reads, in order; every later one a feature that is off
        # unless passed (the stand-in refuses it when it is).
        params = list(inspect.signature(real).parameters.values())
        ours = [p for p in inspect.signature(mla_forward_impl).parameters if p != "features"]
        head = [p.name for p in params[:len(ours)]]
        later = [p.name for p in params[len(ours):] if p.default is not None]
        run.check("mla_forward_impl vs MLAAttention.forward_impl", head == ours and not later,
                  f"{[p.name for p in params]}: the stand-in reads {ours}"
                  + (f"; {later} are not off by default" if later else ""))
    layer_attrs = {"num_heads", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "kv_b_proj", "layer_name", "impl"}
    missing = sorted(a for a in layer_attrs if a not in mla_layer.__init__.__code__.co_names)
    run.check("mla_forward_impl vs MLAAttention.__init__", not missing, f"MLAAttention no longer sets {missing}")

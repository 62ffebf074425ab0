"""The attention backend stand-in: what vLLM's `get_attn_backend` returns, so the model's REAL
attention layers (vLLM's `Attention`, built by the model's own code) run on CPU.

vLLM picks a GPU backend (FlashAttention, FlashInfer, ...) when a layer is built; none runs on
CPU, and vLLM's own CPU backend needs the CPU build's kernels. This backend computes attention in
torch from what the layer hands it: causal per request, grouped-query heads, sliding window, logit
soft cap, attention sinks. The KV cache is stood in by a per-request history of keys and values
(chunked prefill attends to the keys of earlier chunks), kept by the runner and dropped when the
runner drops the request; a chunk that does not continue its request's history is an error, so a
runner that feeds a request's tokens out of order cannot pass.
"""

STOOD_IN = (
    "attention backend: vLLM's real Attention layers run; the backend vLLM's get_attn_backend returns is "
    "a CPU one (causal per request, GQA, sliding window, soft cap, sinks in torch); the paged KV cache is "
    "a per-request key/value history (prefix-cache hits cannot be rehearsed)"
)

BACKEND_NAME = "CPU_ATTN"  # a member of AttentionBackendEnum: the layer looks its name up
MLA_BACKEND_NAME = "TRITON_MLA"


class Metadata:
    """One forward's attention metadata: (req_id, first query row, first position, rows) per
    request in the runner's token order, and the history the keys and values go to."""

    def __init__(self, segments, history):
        self.segments = segments
        self.history = history  # {layer name: {req_id: (keys, values)}}


def extend(meta, layer_name, rid, start, new):
    """A request's cached tensors (keys and values, or MLA's latent and rope key) with this step's
    rows appended: position 0 starts afresh; a chunk that does not continue exactly where the
    cache ends is an error (the runner fed a request's tokens out of order)."""
    import torch

    history = meta.history.setdefault(layer_name, {})
    if start == 0:
        held = new
    else:
        old = history.get(rid)
        have = 0 if old is None else old[0].shape[0]
        if have != start:
            raise RuntimeError(f"request {rid!r} continues at position {start} but the KV cache holds {have} "
                               f"of its positions in {layer_name}")
        held = tuple(torch.cat([a, b]) for a, b in zip(old, new))
    history[rid] = held
    return held


def build(module):
    """The backend and impl classes, placed in `module` (the qualified name vLLM resolves)."""
    import torch

    base = _abstract_backend()

    class StandInAttentionImpl:
        """vLLM's AttentionImpl interface (its __init__ and forward signatures are checked)."""

        supports_quant_query_input = False
        supports_per_head_quant_scales = False
        can_return_lse_for_decode = False
        need_to_return_lse_for_decode = False
        supports_pcp = False
        dcp_world_size = pcp_world_size = total_cp_world_size = 1
        dcp_rank = pcp_rank = total_cp_rank = 0

        def __init__(self, num_heads, head_size, scale, num_kv_heads=None, alibi_slopes=None,
                     sliding_window=None, kv_cache_dtype="auto", logits_soft_cap=None,
                     attn_type="decoder", kv_sharing_target_layer_name=None, sinks=None, **extra):
            if alibi_slopes is not None:
                raise NotImplementedError("the stand-in attention backend has no ALiBi")
            if kv_sharing_target_layer_name is not None:
                raise NotImplementedError("the stand-in attention backend does not share KV caches")
            self.num_heads = num_heads
            self.head_size = head_size
            self.scale = float(scale)
            self.num_kv_heads = num_kv_heads or num_heads
            self.sliding_window = sliding_window
            self.logits_soft_cap = logits_soft_cap
            self.sinks = sinks

        def process_weights_after_loading(self, act_dtype):
            pass

        def forward(self, layer, query, key, value, kv_cache, attn_metadata, output=None,
                    output_scale=None, output_block_scale=None):
            if output is None:
                output = torch.empty(query.shape[0], self.num_heads, value.shape[-1], dtype=query.dtype)
            if attn_metadata is None:
                # vLLM's backends return zeros on the profiling / warm-up run (no metadata).
                return output.zero_()
            query = query.view(query.shape[0], self.num_heads, -1)
            key = key.view(key.shape[0], self.num_kv_heads, -1)
            value = value.view(value.shape[0], self.num_kv_heads, -1)
            out = output.view(query.shape[0], self.num_heads, -1)
            for rid, row, start, n in attn_metadata.segments:
                keys, values = extend(attn_metadata, layer.layer_name, rid, start,
                                      (key[row:row + n], value[row:row + n]))
                out[row:row + n] = self.attend(query[row:row + n], keys, values, start)
            return output

        def attend(self, q, keys, values, start):
            group = self.num_heads // self.num_kv_heads
            # float64: peaked attention turns rounding differences of a batched forward into
            # visible ones; the comparison is about which rows, not about float32 rounding.
            k = keys.repeat_interleave(group, dim=1).double()
            v = values.repeat_interleave(group, dim=1).double()
            scores = torch.einsum("qhd,khd->hqk", q.double(), k) * self.scale
            if self.logits_soft_cap:
                scores = self.logits_soft_cap * torch.tanh(scores / self.logits_soft_cap)
            q_pos = torch.arange(start, start + q.shape[0]).unsqueeze(1)
            k_pos = torch.arange(keys.shape[0]).unsqueeze(0)
            allowed = k_pos <= q_pos
            if self.sliding_window is not None:
                allowed &= k_pos > q_pos - self.sliding_window
            scores = scores.masked_fill(~allowed, float("-inf"))
            if self.sinks is not None:
                sink = self.sinks.double().view(-1, 1, 1).expand(-1, q.shape[0], 1)
                probs = torch.softmax(torch.cat([scores, sink], dim=-1), dim=-1)[..., :-1]
            else:
                probs = torch.softmax(scores, dim=-1)
            return torch.einsum("hqk,khd->qhd", probs, v).to(q.dtype)

    class StandInAttentionBackend(base):
        accept_output_buffer = True
        forward_includes_kv_cache_update = True  # forward stores the keys and values itself

        @staticmethod
        def get_name():
            return BACKEND_NAME

        @staticmethod
        def get_impl_cls():
            return StandInAttentionImpl

        @staticmethod
        def get_builder_cls():
            raise NotImplementedError("the stand-in runner builds the attention metadata itself")

        @staticmethod
        def get_kv_cache_shape(num_blocks, block_size, num_kv_heads, head_size, cache_dtype_str="auto"):
            return (2, num_blocks, block_size, num_kv_heads, head_size)

        @classmethod
        def supports_alibi_sqrt(cls):
            return False

        @classmethod
        def get_required_kv_cache_layout(cls):
            return None

    class StandInMLAImpl(StandInAttentionImpl):
        """What MLAAttention builds as its impl: it keeps the sizes; the layer's forward_impl
        (stood in below) does the arithmetic from the layer's own kv_b_proj."""

        def __init__(self, num_heads, head_size, scale, num_kv_heads=None, alibi_slopes=None,
                     sliding_window=None, kv_cache_dtype="auto", logits_soft_cap=None,
                     attn_type="decoder", kv_sharing_target_layer_name=None, **mla):
            StandInAttentionImpl.__init__(self, num_heads, head_size, scale, num_kv_heads)
            self.mla = mla

    class StandInMLABackend(StandInAttentionBackend):
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

    for cls in (StandInAttentionBackend, StandInAttentionImpl, StandInMLAImpl, StandInMLABackend):
        cls.__module__ = module.__name__
        setattr(module, cls.__name__, cls)
    return StandInAttentionBackend, StandInAttentionImpl


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


def _abstract_backend():
    """vLLM's AttentionBackend base (its defaults answer what this file does not), where it lives."""
    import importlib

    for name in ("vllm.v1.attention.backend", "vllm.attention.backends.abstract"):
        try:
            return importlib.import_module(name).AttentionBackend
        except (ImportError, AttributeError):
            continue
    return object


_ORIGINAL = {}
MODULE = "_rehearse_attention"  # where vLLM's resolve_obj_by_qualname finds the backend


def install():
    """Make vLLM's attention selector return the stand-in backend for every layer."""
    import sys
    import types

    from vllm.platforms import current_platform

    module = sys.modules.setdefault(MODULE, types.ModuleType(MODULE))
    backend, _impl = build(module)
    qualname = f"{module.__name__}.{backend.__name__}"

    mla_layer = _mla_layer()

    def get_attn_backend_cls(selected_backend=None, attn_selector_config=None, *args, **kwargs):
        config = attn_selector_config
        if config is not None and getattr(config, "use_sparse", False):
            from .answer import CannotRehearse

            raise CannotRehearse("the stand-in attention backend has no sparse attention (DeepSeek-V3.2's indexer)")
        if config is not None and getattr(config, "use_mla", False):
            if mla_layer is None:
                from .answer import CannotRehearse

                raise CannotRehearse("the MLA stand-in replaces MLAAttention.forward_impl "
                                     "(vllm.model_executor.layers.attention.mla_attention), which this vLLM does not have")
            return f"{module.__name__}.StandInMLABackend"
        return qualname

    current_platform.get_attn_backend_cls = get_attn_backend_cls
    if mla_layer is not None:
        _ORIGINAL.setdefault("forward_impl", mla_layer.forward_impl)
        mla_layer.forward_impl = mla_forward_impl
    return backend


def _mla_layer():
    """vLLM's MLAAttention where its forward_impl is the seam the MLA stand-in replaces (0.16 and
    later); None before, where MLAAttention lives in vllm.attention.layer without a forward_impl
    (0.15.1 has an mla_attention module, for the backends' impls only)."""
    try:
        from vllm.model_executor.layers.attention import mla_attention
    except ImportError:
        return None
    layer = getattr(mla_attention, "MLAAttention", None)
    return layer if layer is not None and hasattr(layer, "forward_impl") else None


def self_check(run):
    """The stand-in impl against vLLM's AttentionImpl interface: the arguments Attention passes."""
    import importlib
    import inspect
    import sys

    impl = sys.modules[MODULE].StandInAttentionImpl
    real = None
    for name in ("vllm.v1.attention.backend", "vllm.attention.backends.abstract"):
        try:
            real = importlib.import_module(name).AttentionImpl
            break
        except (ImportError, AttributeError):
            continue
    if real is None:
        run.check("StandInAttentionImpl vs AttentionImpl", False, "vLLM defines no AttentionImpl")
    for method in ("__init__", "forward"):
        want = list(inspect.signature(getattr(real, method)).parameters)
        ours = list(inspect.signature(getattr(impl, method)).parameters)[:len(want)]
        run.check(f"StandInAttentionImpl.{method} vs AttentionImpl.{method}", ours == want, f"{want} != {ours}")
    mla_layer = _mla_layer()
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

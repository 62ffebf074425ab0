"""The attention backend stand-in: what vLLM's `get_attn_backend` returns, so the model's REAL
attention layers (vLLM's `Attention`, built by the model's own code) run on CPU.

vLLM picks a GPU backend (FlashAttention, FlashInfer, ...) when a layer is built; none runs on
CPU, and vLLM's own CPU backend needs the CPU build's kernels. This backend computes attention in
torch from what the layer hands it: causal per request, grouped-query heads, sliding window, logit
soft cap, attention sinks. The KV cache is stood in by a per-request history of keys and values
(chunked prefill attends to the keys of earlier chunks), kept by the runner and dropped when the
runner drops the request; a chunk that does not continue its request's history is an error, so a
runner that feeds a request's tokens out of order cannot pass. Multi-head latent attention is
`mla` (its layer's forward_impl stood in over the same history).
"""

import importlib
import inspect
import sys
import types

STOOD_IN = (
    "attention backend: vLLM's real Attention layers run; the backend vLLM's get_attn_backend returns is "
    "a CPU one (causal per request, GQA, sliding window, soft cap, sinks in torch); the paged KV cache is "
    "a per-request key/value history (prefix-cache hits cannot be rehearsed)"
)

BACKEND_NAME = "CPU_ATTN"  # a member of AttentionBackendEnum: the layer looks its name up
MODULE = "_rehearse_attention"  # where vLLM's resolve_obj_by_qualname finds the backend
# Where vLLM defines the attention interfaces, newest first.
_ABSTRACT = ("vllm.v1.attention.backend", "vllm.attention.backends.abstract")


class Metadata:
    """One forward's attention metadata: (req_id, first query row, first position, rows) per
    request in the runner's token order, and the history the keys and values go to."""

    def __init__(self, segments, history):
        self.segments = segments
        self.history = history  # {layer name: {req_id: (keys, values)}}
        # What MLAAttention.forward reads before its kernels (vLLM 0.28-0.29, for the prefill
        # context-parallel gather, unused without it): the decodes at the front of the batch
        # (query length 1), as vLLM's split of decodes and prefills counts them.
        decodes = next((i for i, (_rid, _row, _start, n) in enumerate(segments) if n != 1), len(segments))
        self.num_decodes = self.num_decode_tokens = decodes
        self.num_prefills = len(segments) - decodes


# A block of float64 scores (heads x query rows x keys) stays within this many bytes. glibc serves
# an allocation this size from its heap again once one was freed (its mmap threshold rises up to
# 32 MiB); a larger one is mmapped, page-faulted and unmapped on every call: with whole 2,000-row
# chunks a rehearsal spent half its time in the kernel zeroing those pages. It also bounds the
# memory a long prompt of the user's workload takes.
SCORES_BYTES = 8 << 20


def query_blocks(n, heads, start):
    """(first row, rows) blocks of a chunk of `n` query rows whose first is at position `start`,
    each block's causal scores (its rows over the keys up to its last row) within SCORES_BYTES.
    Every query row attends on its own and a key past a row is masked to an exact zero, so the
    blocks change no result, only how much is allocated at once."""
    blocks, first = [], 0
    while first < n:
        rows = max(1, min(n - first, SCORES_BYTES // (8 * heads * (start + n))))
        blocks.append((first, rows))
        first += rows
    return blocks


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
        import torch

        if output is None:
            output = torch.empty(query.shape[0], self.num_heads, value.shape[-1], dtype=query.dtype)
        if attn_metadata is None:
            # vLLM's backends return zeros on the profiling / warm-up run (no metadata).
            return output.zero_()
        query = query.view(query.shape[0], self.num_heads, -1)
        key = key.view(key.shape[0], self.num_kv_heads, -1)
        value = value.view(value.shape[0], self.num_kv_heads, -1)
        out = output.view(query.shape[0], self.num_heads, -1)
        group = self.num_heads // self.num_kv_heads
        for rid, row, start, n in attn_metadata.segments:
            keys, values = extend(attn_metadata, layer.layer_name, rid, start,
                                  (key[row:row + n], value[row:row + n]))
            # float64: peaked attention turns rounding differences of a batched forward into
            # visible ones; the comparison is about which rows, not about float32 rounding.
            self.attend_rows(query[row:row + n], keys.repeat_interleave(group, dim=1).double(),
                             values.repeat_interleave(group, dim=1).double(), start, out[row:row + n])
        return output

    def attend_rows(self, q, k, v, start, out):
        """Query rows `q` at positions `start`... over float64 keys and values [keys, heads, size]
        (every key up to the last row), into `out`, block by block. Keys and values are laid out
        once per call head-major, the shapes BLAS multiplies fastest."""
        kt = k.permute(1, 2, 0).contiguous()  # heads x size x keys
        vt = v.permute(1, 2, 0).contiguous()  # heads x size x keys
        for first, rows in query_blocks(q.shape[0], self.num_heads, start):
            at = start + first
            out[first:first + rows] = self.attend(q[first:first + rows], kt[:, :, :at + rows], vt[:, :, :at + rows], at)

    def attend(self, q, kt, vt, start):
        """Query rows at positions `start`... over the float64 keys and values (heads x size x keys)
        up to the last of them.

        One scores block, changed in place (each copy of it costs as much as the arithmetic): the
        causal mask on the rows' own keys alone (every earlier key is before every row), the
        softmax's exponentials left unnormalised until the values are summed, then divided by
        their row's sum. A row's result depends on its own query and keys only, not on the block
        or chunk it comes in: a batched forward and a prompt's forward alone agree exactly."""
        import torch

        n, keys = q.shape[0], kt.shape[2]
        # The scale on the query rows (rows x size), not on the scores block (rows x keys).
        scores = torch.matmul(q.double().transpose(0, 1).mul_(self.scale), kt)  # heads x rows x keys
        if self.logits_soft_cap:
            scores.div_(self.logits_soft_cap).tanh_().mul_(self.logits_soft_cap)
        q_pos = torch.arange(start, start + n).unsqueeze(1)
        if self.sliding_window is None:
            own = torch.arange(start, keys).unsqueeze(0)
            masked, mask = scores[:, :, start:], own > q_pos
        else:
            k_pos = torch.arange(keys).unsqueeze(0)
            masked, mask = scores, (k_pos > q_pos) | (k_pos <= q_pos - self.sliding_window)
        masked.masked_fill_(mask, float("-inf"))
        top = scores.amax(dim=-1, keepdim=True)
        if self.sinks is not None:
            sink = self.sinks.double().view(-1, 1, 1)
            top = torch.maximum(top, sink)
        scores.sub_(top)
        # A masked key's exp(-inf) takes torch's scalar path, 2.4x slower than a finite score's
        # (a tenth of a rehearsal's scores are masked): its score is set to 0 for the exp, and its
        # weight to an exact 0 after.
        masked.masked_fill_(mask, 0.0)
        scores.exp_()
        masked.masked_fill_(mask, 0.0)
        total = scores.sum(dim=-1, keepdim=True)
        if self.sinks is not None:
            total += (sink - top).exp()
        # values x weights: heads x size x rows (BLAS's faster orientation for a short size), then
        # each row divided by its weights' sum.
        out = torch.matmul(vt, scores.transpose(1, 2)).div_(total.transpose(1, 2))
        return out.permute(2, 0, 1).to(q.dtype)


def backend_class(base, name, impl):
    """An AttentionBackend (vLLM's `base`, whose defaults answer the rest) named `name`, whose
    layers get `impl`."""

    class StandInAttentionBackend(base):  # type: ignore[valid-type, misc]  # vLLM's class, found at run time
        accept_output_buffer = True
        forward_includes_kv_cache_update = True  # forward stores the keys and values itself

        @staticmethod
        def get_name():
            return name

        @staticmethod
        def get_impl_cls():
            return impl

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

    return StandInAttentionBackend


def abstract(name):
    """vLLM's attention interface class `name` (AttentionBackend, AttentionImpl), where it lives."""
    for module in _ABSTRACT:
        try:
            return getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            continue
    return None


def selector_config(config, args, kwargs):
    """What the platform's backend selector is asked: vLLM 0.13+ passes an AttentionSelectorConfig;
    0.12 passes (selected_backend, head_size, dtype, kv_cache_dtype, block_size, use_mla, has_sink,
    use_sparse, attn_type), positional, and `config` is then the head size."""
    if config is not None and not isinstance(config, int):
        return config
    named = dict(zip(("dtype", "kv_cache_dtype", "block_size", "use_mla", "has_sink", "use_sparse"), args))
    named.update(kwargs)
    return types.SimpleNamespace(use_mla=bool(named.get("use_mla")), use_sparse=bool(named.get("use_sparse")))


def self_check(run):
    """The stand-in impl against vLLM's AttentionImpl interface: the arguments Attention passes."""
    impl = sys.modules[MODULE].StandInAttentionImpl
    real = abstract("AttentionImpl")
    if real is None:
        run.check("StandInAttentionImpl vs AttentionImpl", False, "vLLM defines no AttentionImpl")
    for method in ("__init__", "forward"):
        want = list(inspect.signature(getattr(real, method)).parameters)
        ours = list(inspect.signature(getattr(impl, method)).parameters)[:len(want)]
        run.check(f"StandInAttentionImpl.{method} vs AttentionImpl.{method}", ours == want, f"{want} != {ours}")

"""The attention backend on Model Runner V2: the project's CPU attention (`attention.py`) reading
and writing the paged KV cache V2 binds, through V2's own block table and slot mapping (imports
vLLM: imported only once the adapter fits).

V2 builds each step's attention metadata with the backend's builder from its own
CommonAttentionMetadata (block table, slot mapping, query start locations, sequence lengths), all
computed by V2's real Triton kernels. The builder hands that on as it is; the impl stores this
step's keys and values at their slots of the layer's KV tensor, gathers each request's keys and
values back through its row of the block table, and attends with the CPU backend's arithmetic
(float64, causal, GQA, sliding window, soft cap, sinks). A wrong block table or slot mapping reads
other keys. The reference forward (`attention.Metadata`, a per-request history) takes the CPU
backend's own path, so the same layers compute both.
"""

import sys

from vllm.v1.attention.backend import AttentionMetadataBuilder

from ... import attention
from ...answer import CannotRehearse

BACKEND = "StandInPagedAttentionBackend"


class PagedBuilder(AttentionMetadataBuilder):
    """The metadata is V2's CommonAttentionMetadata itself (what the impl reads is in it)."""

    def __init__(self, kv_cache_spec, layer_names, vllm_config, device, **kwargs):
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)

    def build(self, common_prefix_len, common_attn_metadata, fast_build=False):
        return common_attn_metadata


class PagedAttentionImpl(attention.StandInAttentionImpl):
    def forward(self, layer, query, key, value, kv_cache, attn_metadata, output=None,
                output_scale=None, output_block_scale=None):
        if attn_metadata is None or isinstance(attn_metadata, attention.Metadata):
            # The warm-up (zeros) and the reference forward (a per-request history).
            return super().forward(layer, query, key, value, kv_cache, attn_metadata, output,
                                   output_scale, output_block_scale)
        m = attn_metadata
        n = int(m.num_actual_tokens)
        heads, kv_heads = self.num_heads, self.num_kv_heads
        q = query[:n].view(n, heads, -1)
        k = key[:n].view(n, kv_heads, -1)
        v = value[:n].view(n, kv_heads, -1)
        keys, values = cache_views(kv_cache, kv_heads, k.shape[-1], v.shape[-1])
        block_size = keys.shape[1]
        slots = m.slot_mapping[:n].long()
        keys.view(-1, kv_heads, k.shape[-1])[slots] = k
        values.view(-1, kv_heads, v.shape[-1])[slots] = v
        out = output[:n].view(n, heads, -1)
        starts = m.query_start_loc_cpu.tolist()
        lens = m.seq_lens.tolist()
        group = heads // kv_heads
        for i in range(int(m.num_reqs)):
            a, b, length = starts[i], starts[i + 1], int(lens[i])
            if b == a:
                continue
            blocks = m.block_table_tensor[i, :-(-length // block_size)].long()
            kk = keys[blocks].reshape(-1, kv_heads, k.shape[-1])[:length].repeat_interleave(group, 1).double()
            vv = values[blocks].reshape(-1, kv_heads, v.shape[-1])[:length].repeat_interleave(group, 1).double()
            start = length - (b - a)
            for first, rows in attention.query_blocks(b - a, heads, start):
                at = start + first
                out[a + first:a + first + rows] = self.attend(q[a + first:a + first + rows], kk[:at + rows],
                                                              vv[:at + rows], at)
        return output


def cache_views(kv_cache, kv_heads, key_size, value_size):
    """(keys, values), each [blocks, block size, KV heads, head size], of the tensor V2 binds to a
    layer: (blocks, 2, block size, KV heads x head size) in 0.34's layout."""
    if kv_cache.dim() != 4 or kv_cache.shape[1] != 2 or kv_cache.shape[3] != kv_heads * key_size \
            or key_size != value_size:
        raise CannotRehearse(f"the KV tensor Model Runner V2 binds has shape {tuple(kv_cache.shape)}, not "
                             f"(blocks, 2, block size, {kv_heads} x {key_size})")
    kv = kv_cache.view(kv_cache.shape[0], 2, kv_cache.shape[2], kv_heads, key_size)
    return kv[:, 0], kv[:, 1]


def register(base_backend):
    """The paged backend (the CPU backend with V2's builder and the paged impl), in the module where
    vLLM's resolve_obj_by_qualname finds the stand-in backends; its qualified name."""
    module = sys.modules[attention.MODULE]
    backend = type(BACKEND, (base_backend,), {
        "get_impl_cls": staticmethod(lambda: PagedAttentionImpl),
        "get_builder_cls": staticmethod(lambda: PagedBuilder),
        "__module__": module.__name__, "__qualname__": BACKEND})
    for cls in (backend, PagedAttentionImpl, PagedBuilder):
        setattr(module, cls.__name__, cls)
    return f"{module.__name__}.{BACKEND}"


def selecting(select, plain, paged):
    """The platform's get_attn_backend_cls (the rehearsal's, `select`) answering `paged` where it
    answers the plain CPU backend `plain`; MLA has no paged stand-in on V2 yet."""

    def get_attn_backend_cls(*args, **kwargs):
        chosen = select(*args, **kwargs)
        if chosen == plain:
            return paged
        raise CannotRehearse("multi-head latent attention on Model Runner V2: the rehearsal's MLA stand-in reads a "
                             "per-request history, not V2's paged KV cache")

    return get_attn_backend_cls


def self_check(run):
    import inspect

    real = inspect.signature(AttentionMetadataBuilder.build)
    ours = inspect.signature(PagedBuilder.build)
    run.check("PagedBuilder.build vs AttentionMetadataBuilder.build",
              list(real.parameters) == list(ours.parameters), f"{real} != {ours}")
    from vllm.v1.attention.backend import CommonAttentionMetadata

    fields = set(getattr(CommonAttentionMetadata, "__dataclass_fields__", ()))
    wanted = {"num_actual_tokens", "num_reqs", "slot_mapping", "query_start_loc_cpu", "seq_lens", "block_table_tensor"}
    run.check("PagedAttentionImpl vs CommonAttentionMetadata", wanted <= fields,
              f"CommonAttentionMetadata lacks {sorted(wanted - fields)}")

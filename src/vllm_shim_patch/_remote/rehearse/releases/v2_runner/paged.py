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
        store(keys, values, k, v, m.slot_mapping[:n])
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
            self.attend_rows(q[a:b], kk, vv, length - (b - a), out[a:b])
        return output


def store(keys, values, k, v, slot_mapping):
    """reshape_and_cache_flash's effect in torch: each token's key and value at its slot. Padding
    slots (negative, PAD_SLOT_ID) are skipped, as the kernel skips them: -1 // block size would
    write the last block's last row, another request's."""
    slots = slot_mapping.long()
    keep = slots >= 0
    block_size = keys.shape[1]
    # A slot is block * block size + offset: its block's row at that offset (strided views).
    blocks_of, offsets = slots[keep] // block_size, slots[keep] % block_size
    keys[blocks_of, offsets] = k[keep]
    values[blocks_of, offsets] = v[keep]


def cache_views(kv_cache, kv_heads, key_size, value_size):
    """(keys, values), each [blocks, block size, KV heads, head size], of the tensor V2 binds to a
    layer: vLLM 0.34's logical per-layer view [blocks, KV heads, block size, content], the content
    a head's key then its value (as vLLM's own Triton and Flex backends split it); the strides
    are the resolved layout's."""
    if kv_cache.dim() != 4 or kv_cache.shape[1] != kv_heads or kv_cache.shape[3] != key_size + value_size:
        raise CannotRehearse(f"the KV tensor Model Runner V2 binds has shape {tuple(kv_cache.shape)}, not "
                             f"(blocks, {kv_heads} KV heads, block size, {key_size} + {value_size})")
    keys, values = kv_cache.transpose(1, 2).split([key_size, value_size], dim=-1)
    return keys, values


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


def selecting(select, stood_in):
    """The platform's get_attn_backend_cls (the rehearsal's, `select`) answering, where it answers
    one of the stand-in backends V2 cannot use as they are (the plain CPU one, MLA's), the paged
    one `stood_in` maps it to."""

    def get_attn_backend_cls(*args, **kwargs):
        chosen = select(*args, **kwargs)
        if chosen in stood_in:
            return stood_in[chosen]
        raise CannotRehearse(f"the attention backend {chosen} has no stand-in over Model Runner V2's paged KV cache")

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

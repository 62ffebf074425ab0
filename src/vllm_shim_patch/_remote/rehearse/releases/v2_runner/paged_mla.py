"""Multi-head latent attention on Model Runner V2: the MLA stand-in (`mla`) reading and writing the
paged latent KV cache V2 binds, through V2's own block table and slot mapping (imports vLLM:
imported only once the adapter fits).

MLAAttention (vLLM 0.34) binds the layer's tensor [blocks, 1, block size, kv_lora_rank + rope]
squeezed to [blocks, block size, kv_lora_rank + rope]; its forward stores this step's latent and
rope key through the impl's do_kv_cache_update at the slots V2 computed (vLLM's own kernel,
concat_and_cache_mla, writes the latent then the rope key into a slot's row: the stand-in writes
the same row in torch), then calls forward_impl, which the MLA stand-in replaces: given this
module's metadata it gathers each request's latent history back through its row of the block
table and attends with the MLA stand-in's own arithmetic (`mla.attend_request`, kv_b_proj's
expansion, float64, causal). A wrong block table or slot mapping reads other tokens' latents.
The reference forward (`attention.Metadata`, a per-request history) takes the V1 path, so the
same layers compute both.
"""

import sys

from vllm.v1.attention.backend import AttentionMetadataBuilder

from ... import attention, mla
from ...answer import CannotRehearse

BACKEND = "StandInPagedMLABackend"


class PagedMLAMetadata:
    """V2's CommonAttentionMetadata for an MLA layer, with what MLAAttention.forward reads before
    its kernels (the decode count, for the prefill context-parallel gather it does not run here)
    and the paged attention the stand-in forward_impl asks of it (`attend_mla`)."""

    def __init__(self, common):
        self.common = common
        self.num_actual_tokens = int(common.num_actual_tokens)
        self.num_reqs = int(common.num_reqs)
        # V2 puts the decodes (query length 1) first, as vLLM's MLA builders split them.
        lens = common.query_start_loc_cpu.diff().tolist()[:self.num_reqs]
        decodes = next((i for i, n in enumerate(lens) if n != 1), len(lens))
        self.num_decodes = self.num_decode_tokens = decodes
        self.num_prefills = self.num_reqs - decodes

    def attend_mla(self, q, kv_cache, output, sizes, kv_b_proj, scale):
        """MLAAttention.forward_impl's result over V2's paged latent cache (its slots already hold
        this step's rows: MLAAttention.forward stored them first)."""
        heads, nope, rope, v_dim = sizes
        m, n = self.common, self.num_actual_tokens
        rows = cache_rows(kv_cache, rope)
        block_size, width = rows.shape[1], rows.shape[2]
        flat = output.view(output.shape[0], heads * v_dim)
        flat[n:].zero_()
        q = q[:n].view(n, heads, nope + rope)
        starts = m.query_start_loc_cpu.tolist()
        lens = m.seq_lens.tolist()
        for i in range(self.num_reqs):
            a, b, length = starts[i], starts[i + 1], int(lens[i])
            if b == a:
                continue
            blocks = m.block_table_tensor[i, :-(-length // block_size)].long()
            held = rows[blocks].reshape(-1, width)[:length]
            latent, pe = held.split([width - rope, rope], dim=-1)
            mla.attend_request(q, latent, pe, (a, length - (b - a), b - a), flat, sizes, kv_b_proj, scale)
        return output


class PagedMLABuilder(AttentionMetadataBuilder):
    def __init__(self, kv_cache_spec, layer_names, vllm_config, device, **kwargs):
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)

    def build(self, common_prefix_len, common_attn_metadata, fast_build=False):
        return PagedMLAMetadata(common_attn_metadata)


def cache_rows(kv_cache, rope):
    """The tensor MLAAttention holds, [blocks, block size, kv_lora_rank + rope] (checked)."""
    if kv_cache.dim() != 3 or kv_cache.shape[-1] <= rope:
        raise CannotRehearse(f"the latent KV tensor Model Runner V2 binds to an MLA layer has shape "
                             f"{tuple(kv_cache.shape)}, not (blocks, block size, kv_lora_rank + {rope})")
    return kv_cache


def store(kv_c_normed, k_pe, kv_cache, slot_mapping, kv_cache_dtype):
    """concat_and_cache_mla's effect in torch: a slot's row holds its latent, then its rope key.
    Padding slots (negative, PAD_SLOT_ID) are skipped, as the kernel skips them."""
    import torch

    if kv_cache_dtype != "auto":
        raise CannotRehearse(f"the MLA stand-in's paged cache stores no quantized KV cache ({kv_cache_dtype})")
    slots = slot_mapping.flatten().long()
    n = slots.shape[0]
    row = torch.cat([kv_c_normed[:n].reshape(n, -1), k_pe[:n].reshape(n, -1)], dim=-1)
    rows = cache_rows(kv_cache, k_pe.reshape(k_pe.shape[0], -1).shape[-1])
    if row.shape[-1] != rows.shape[-1]:
        raise CannotRehearse(f"an MLA layer's latent and rope key ({row.shape[-1]} values) do not fill a row of "
                             f"the KV tensor Model Runner V2 binds ({rows.shape[-1]})")
    keep = slots >= 0
    slots, row = slots[keep], row[keep]
    block_size = rows.shape[1]
    rows[slots // block_size, slots % block_size] = row.to(rows.dtype)


def do_kv_cache_update(self, kv_c_normed, k_pe, kv_cache, slot_mapping, kv_cache_dtype, k_scale,
                       skip_scale=False):
    """MLAAttentionImpl.do_kv_cache_update of the paged MLA impl (V1's empty tensor: nothing)."""
    if kv_cache.numel() == 0:
        return
    store(kv_c_normed, k_pe, kv_cache, slot_mapping, kv_cache_dtype)


def impl_class():
    """The MLA stand-in impl whose do_kv_cache_update stores into V2's paged cache."""
    return type("PagedMLAImpl", (mla.StandInMLAImpl,), {"do_kv_cache_update": do_kv_cache_update})


def register(base_backend):
    """The paged MLA backend (the MLA stand-in backend with this builder and impl), where vLLM's
    resolve_obj_by_qualname finds the stand-in backends; its qualified name."""
    module = sys.modules[attention.MODULE]
    impl = impl_class()
    backend = type(BACKEND, (base_backend,), {
        "get_impl_cls": staticmethod(lambda: impl),
        "get_builder_cls": staticmethod(lambda: PagedMLABuilder),
        "__module__": module.__name__, "__qualname__": BACKEND})
    for cls in (backend, impl, PagedMLABuilder):
        cls.__module__ = module.__name__
        setattr(module, cls.__name__, cls)
    return f"{module.__name__}.{BACKEND}"


def self_check(run):
    """The stand-in's do_kv_cache_update takes what vLLM's MLAAttentionImpl's does; the layer binds
    the squeezed view the stand-in reads; the metadata fields it reads are V2's."""
    import inspect

    base = mla.impl_base()
    if base is None or "do_kv_cache_update" not in vars(base):
        run.check("PagedMLAImpl vs MLAAttentionImpl.do_kv_cache_update", False,
                  "vLLM's MLAAttentionImpl has no do_kv_cache_update: MLAAttention stores the latent elsewhere")
        return
    real = list(inspect.signature(base.do_kv_cache_update).parameters)
    ours = list(inspect.signature(do_kv_cache_update).parameters)
    run.check("PagedMLAImpl.do_kv_cache_update vs MLAAttentionImpl.do_kv_cache_update", real == ours,
              f"{real} != {ours}")
    layer = mla.layer()
    bind = getattr(layer, "bind_kv_cache", None)
    squeezes = bind is not None and "squeeze" in bind.__code__.co_names
    run.check("cache_rows vs MLAAttention.bind_kv_cache", squeezes,
              "MLAAttention.bind_kv_cache no longer squeezes V2's [blocks, 1, block size, content] view")

"""Model Runner V2's stand-ins put in place together, and checked together (imports vLLM: imported
only once an adapter fits): the CUDA parts, the paged attention backends (plain, MLA) behind the
platform's selector, and the extensible KV cache's resolver asked as on CUDA."""

import sys

from vllm.config import VllmConfig
from vllm.platforms import current_platform

from ... import attention
from . import checks, cuda, kvcache, paged, paged_mla


class _Selector:
    """What the backend selector is asked for a plain (not MLA, not sparse) attention layer."""

    use_mla = False
    use_sparse = False


class _MLASelector(_Selector):
    """... and for a dense multi-head latent attention layer."""

    use_mla = True


def resolver():
    """VllmConfig._resolve_extensible_kv_cache's replacement (vLLM's own, asked as on CUDA)."""
    return kvcache.resolving_as_cuda(current_platform, VllmConfig._resolve_extensible_kv_cache)


def install(undo, resolve):
    """Each stand-in in place, its undo on `undo`; `resolve`: `resolver()`'s function."""
    cuda.install(undo)
    select = current_platform.get_attn_backend_cls
    module = sys.modules[attention.MODULE]
    plain, latent = select(None, _Selector()), select(None, _MLASelector())
    stood_in = {plain: paged.register(getattr(module, plain.rsplit(".", 1)[1])),
                latent: paged_mla.register(getattr(module, latent.rsplit(".", 1)[1]))}
    current_platform.get_attn_backend_cls = paged.selecting(select, stood_in)
    undo.callback(setattr, current_platform, "get_attn_backend_cls", select)
    real = VllmConfig._resolve_extensible_kv_cache
    VllmConfig._resolve_extensible_kv_cache = resolve
    undo.callback(setattr, VllmConfig, "_resolve_extensible_kv_cache", real)


def self_check(run, gpu_worker):
    cuda.self_check(run)
    paged.self_check(run)
    paged_mla.self_check(run)
    checks.worker(run, gpu_worker)
    checks.resolver(run, VllmConfig)

"""Model Runner V2's stand-ins put in place together, and checked together (imports vLLM: imported
only once an adapter fits): the CUDA parts, the paged attention backend behind the platform's
selector, and the extensible KV cache's resolver asked as on CUDA."""

import sys

from vllm.config import VllmConfig
from vllm.platforms import current_platform

from ... import attention
from . import checks, cuda, kvcache, paged


class _Selector:
    """What the backend selector is asked for a plain (not MLA, not sparse) attention layer."""

    use_mla = False
    use_sparse = False


def resolver():
    """VllmConfig._resolve_extensible_kv_cache's replacement (vLLM's own, asked as on CUDA)."""
    return kvcache.resolving_as_cuda(current_platform, VllmConfig._resolve_extensible_kv_cache)


def install(undo, resolve):
    """Each stand-in in place, its undo on `undo`; `resolve`: `resolver()`'s function."""
    cuda.install(undo)
    select = current_platform.get_attn_backend_cls
    plain = select(None, _Selector())
    paged_name = paged.register(getattr(sys.modules[attention.MODULE], plain.rsplit(".", 1)[1]))
    current_platform.get_attn_backend_cls = paged.selecting(select, plain, paged_name)
    undo.callback(setattr, current_platform, "get_attn_backend_cls", select)
    real = VllmConfig._resolve_extensible_kv_cache
    VllmConfig._resolve_extensible_kv_cache = resolve
    undo.callback(setattr, VllmConfig, "_resolve_extensible_kv_cache", real)


def self_check(run, gpu_worker):
    cuda.self_check(run)
    paged.self_check(run)
    checks.worker(run, gpu_worker)
    checks.resolver(run, VllmConfig)

"""The extensible KV cache's contract, enforced on CPU (no vLLM imported here: tested without it).

On CUDA vLLM 0.34 resolves `CacheConfig.enable_extensible_kv_cache` to True where the caller left
it unset (`VllmConfig._resolve_extensible_kv_cache`): the Worker's `initialize_from_config` then
reserves the cache's address space and commits physical memory for the null block only; the engine
core commits the rest once warmed up (`finalize_extensible_kv_cache`, `extend_kv_cache`). A caller
that only calls `initialize_from_config`, as speculators' generator does, hands its scheduler's
blocks to the runner with no memory behind them. On CPU vLLM resolves the field to False, so no CPU
run shows this unless the rehearsal keeps the books: `Commitments` counts the committed blocks as
the real cache would, and a forward that uses a block past them fails, naming the rule that fixes it.
"""

from ...answer import ContractBroken

RULE = "generator-kv-cache-up-front"
NULL_BLOCKS = 1  # what initialize_from_config commits of an extensible cache: the null block (id 0)


class KVCacheNotCommitted(ContractBroken):
    """A forward used a KV cache block that has no memory committed behind it."""


class Commitments:
    """How many blocks of the worker's KV cache have memory behind them (None: all, the cache was
    allocated up front)."""

    def __init__(self):
        self.extensible = False
        self.num_blocks = None
        self.committed = None

    def initialized(self, num_blocks, extensible):
        """Worker.initialize_from_config: an extensible cache commits the null block only."""
        self.extensible, self.num_blocks = bool(extensible), int(num_blocks)
        self.committed = NULL_BLOCKS if extensible else None

    def extended(self, num_blocks):
        """Worker.extend_kv_cache: the engine core commits the cache's final size."""
        self.committed = int(num_blocks)

    def check(self, highest_block):
        """Raise where a forward uses block `highest_block` (the highest id it reads or writes)
        past the committed memory."""
        if self.committed is None or highest_block < self.committed:
            return
        raise KVCacheNotCommitted(
            f"KV cache block {highest_block} used past the committed memory: vLLM resolves "
            "enable_extensible_kv_cache to True on CUDA, so initialize_from_config committed "
            f"{self.committed} of {self.num_blocks} blocks (the null block); the engine core commits the rest by "
            "finalize_extensible_kv_cache and extend_kv_cache, which speculators' generator never calls: on a GPU "
            f"this forward reads and writes unbacked memory (rule {RULE}: "
            "CacheConfig(enable_extensible_kv_cache=False) allocates the KV cache up front)")


def resolving_as_cuda(platform, real):
    """VllmConfig._resolve_extensible_kv_cache as on CUDA: vLLM's own resolver (`real`, unbound)
    asked with the platform answering is_cuda_alike() True for that one call, so every other
    reason it weighs (kv_cache_memory_bytes, a connector, the caller's own False) still counts."""

    def _resolve_extensible_kv_cache(self):
        own = vars(platform).get("is_cuda_alike", _MISSING)
        platform.is_cuda_alike = _yes
        try:
            return real(self)
        finally:
            if own is _MISSING:
                del platform.is_cuda_alike
            else:
                platform.is_cuda_alike = own

    return _resolve_extensible_kv_cache


_MISSING = object()


def _yes():
    return True

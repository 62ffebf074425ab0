"""vLLM 0.21+: MLAAttention.__init__ builds an MLA prefill backend (get_mla_prefill_backend, imported
by name into mla_attention: FlashAttention, FlashInfer, TRT-LLM ragged by device capability, CPU
SDPA on a CPU platform from 0.29). Its kernels run only inside forward_impl, which is stood in
(`mla`): the stand-in backend keeps the sizes (vLLM's own MLAPrefillBackend.__init__) and runs
nothing."""

from typing import Any

MODULE = "vllm.model_executor.layers.attention.mla_attention"
_ORIGINAL: dict[str, Any] = {}


def install():
    """The selector answers the stand-in backend, where MLAAttention asks one (None: it asks none)."""
    import sys

    from . import attention

    mla_attention = sys.modules[MODULE]
    real = getattr(mla_attention, "get_mla_prefill_backend", None)
    if real is None:
        return None
    from vllm.v1.attention.backends.mla.prefill.base import MLAPrefillBackend

    class StandInMLAPrefillBackend(MLAPrefillBackend):
        @staticmethod
        def get_name():
            return "STAND_IN_MLA_PREFILL"

        def run_prefill_new_tokens(self, *args, **kwargs):
            raise NotImplementedError("the stand-in MLA forward_impl runs the prefill itself")

        def run_prefill_context_chunk(self, *args, **kwargs):
            raise NotImplementedError("the stand-in MLA forward_impl runs the prefill itself")

    StandInMLAPrefillBackend.__module__ = attention.MODULE
    setattr(sys.modules[attention.MODULE], StandInMLAPrefillBackend.__name__, StandInMLAPrefillBackend)
    _ORIGINAL.setdefault("get_mla_prefill_backend", real)

    def get_mla_prefill_backend(vllm_config):
        return StandInMLAPrefillBackend

    mla_attention.get_mla_prefill_backend = get_mla_prefill_backend  # type: ignore[attr-defined]  # vLLM's name
    return StandInMLAPrefillBackend


def self_check(run):
    """The stand-in selector takes what the real one does; the stand-in backend is concrete."""
    import inspect
    import sys

    from . import attention

    real = _ORIGINAL.get("get_mla_prefill_backend")
    if real is None:
        return
    ours = sys.modules[attention.MODULE].StandInMLAPrefillBackend
    abstract = sorted(getattr(ours, "__abstractmethods__", ()))
    run.check("StandInMLAPrefillBackend vs get_mla_prefill_backend",
              list(inspect.signature(real).parameters) == ["vllm_config"] and not abstract,
              f"get_mla_prefill_backend{inspect.signature(real)}; abstract: {abstract}")

"""The attention backends the rehearsal stands in, put in place together behind vLLM's one
backend selector: the plain one (`attention`) and multi-head latent attention's (`mla`, which
builds on the plain one), and their self-checks."""

import sys
import types

from . import attention, mla, mla_checks


def install():
    """Make vLLM's attention selector return the stand-in backend for every layer (MLA's: see `mla`)."""
    from vllm.platforms import current_platform

    module = sys.modules.setdefault(attention.MODULE, types.ModuleType(attention.MODULE))
    backend = attention.backend_class(attention.abstract("AttentionBackend") or object, attention.BACKEND_NAME,
                                      attention.StandInAttentionImpl)
    mla_backend = mla.backend(backend)
    for cls in (backend, attention.StandInAttentionImpl, mla.StandInMLAImpl, mla_backend):
        cls.__module__ = module.__name__
        setattr(module, cls.__name__, cls)
    seam = mla.install()

    def get_attn_backend_cls(selected_backend=None, attn_selector_config=None, *args, **kwargs):
        config = attention.selector_config(attn_selector_config, args, kwargs)
        if getattr(config, "use_sparse", False):
            from .answer import CannotRehearse

            raise CannotRehearse("the stand-in attention backend has no sparse attention (DeepSeek-V3.2's indexer)")
        if getattr(config, "use_mla", False):
            mla.check_installed(seam)
            return f"{module.__name__}.{mla_backend.__name__}"
        return f"{module.__name__}.{backend.__name__}"

    current_platform.get_attn_backend_cls = get_attn_backend_cls
    return backend


def self_check(run):
    attention.self_check(run)
    mla_checks.self_check(run)

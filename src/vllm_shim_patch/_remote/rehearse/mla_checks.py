"""The MLA stand-in's self-checks, at the seam the installed vLLM has (`mla`): what MLAAttention
hands the stand-in, and everything it asks of the stand-in impl besides, read from its bytecode."""

import inspect
import sys

from . import mla, mla_prefill
from .selfcheck import attrs_used

# MLAAttention's methods that run outside the kernel call the stand-in replaces.
LAYER_PATHS = ("__init__", "forward", "update_kv_cache", "process_weights_after_loading")
LAYER_ATTRS = {"num_heads", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "kv_b_proj", "layer_name", "impl"}


def self_check(run):
    from . import attention

    impl = sys.modules[attention.MODULE].StandInMLAImpl
    mla_layer = mla.layer()
    if mla_layer is not None:
        _forward_impl(run, mla_layer)
        mla_prefill.self_check(run)
    else:
        mla_layer = mla.impl_layer()
        if mla_layer is None:
            return  # no seam: a model with MLA is refused ("cannot rehearse")
        _impl_forward(run, impl)
    used = attrs_used(mla_layer, LAYER_PATHS, "impl")
    missing = sorted(a for a in used if not hasattr(impl, a))
    run.check("StandInMLAImpl vs MLAAttention's use of self.impl", not missing,
              f"MLAAttention uses impl.{missing}, which the stand-in does not have")
    defaults = _impl_defaults()
    wrong = sorted(a for a, v in defaults.items() if hasattr(impl, a) and getattr(impl, a) != v)
    run.check("StandInMLAImpl vs AttentionImplBase's defaults", not wrong,
              f"vLLM's defaults of {wrong} differ from the stand-in's")


def _forward_impl(run, mla_layer):
    """vLLM 0.16+: the parameters mla_forward_impl reads, in order; every later one a feature that
    is off unless passed (the stand-in refuses it when it is); the layer keeps what it reads."""
    real = mla._ORIGINAL.get("forward_impl")
    if real is not None:
        params = list(inspect.signature(real).parameters.values())
        ours = [p for p in inspect.signature(mla.mla_forward_impl).parameters if p != "features"]
        head = [p.name for p in params[:len(ours)]]
        later = [p.name for p in params[len(ours):] if p.default is not None]
        run.check("mla_forward_impl vs MLAAttention.forward_impl", head == ours and not later,
                  f"{[p.name for p in params]}: the stand-in reads {ours}"
                  + (f"; {later} are not off by default" if later else ""))
    missing = sorted(a for a in LAYER_ATTRS if a not in mla_layer.__init__.__code__.co_names)
    run.check("mla_forward_impl vs MLAAttention.__init__", not missing, f"MLAAttention no longer sets {missing}")


def _impl_forward(run, impl):
    """vLLM 0.12-0.15: StandInMLAImpl.forward takes what MLAAttentionImpl.forward is given, and
    MLAAttentionImpl.__init__ the sizes and kv_b_proj the stand-in reads."""
    base = mla.impl_base()
    want = list(inspect.signature(base.forward).parameters)
    ours = list(inspect.signature(impl.forward).parameters)
    run.check("StandInMLAImpl.forward vs MLAAttentionImpl.forward", ours == want, f"{want} != {ours}")
    init = set(inspect.signature(base.__init__).parameters)
    needed = {"qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "kv_b_proj"}
    run.check("StandInMLAImpl.__init__ vs MLAAttentionImpl.__init__", needed <= init,
              f"MLAAttentionImpl.__init__ no longer takes {sorted(needed - init)}")


def _impl_defaults():
    """The class-level answers of vLLM's MLAAttentionImpl that the stand-in gives too."""
    base = mla.impl_base()
    names = ("is_sparse", "supports_dense_mha_prefill", "lse_base_on_e", "supports_quant_query_input")
    return {n: getattr(base, n) for n in names if base is not None and isinstance(getattr(base, n, None), bool)}

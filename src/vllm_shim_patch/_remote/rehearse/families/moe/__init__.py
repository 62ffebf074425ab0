"""The mixture-of-experts stand-in: the model's real FusedMoE layers run on CPU through vLLM's own
CPU expert path, wherever the installed vLLM keeps it.

vLLM picks the unquantized MoE backend by platform; a machine without a GPU is no platform it
knows, and the CUDA kernels (`_moe_C::topk_softmax`, Triton) do not run on CPU. Each module here
is one place vLLM has kept its CPU expert path, chosen by what the installed vLLM defines (its
`fits()`, never a version string), the first that fits:

  forward_cpu       no backend oracle; UnquantizedFusedMoEMethod.forward_cpu calls the layer's
                    cpu_fused_moe, vLLM's CPUFusedMOE (torch routing, torch expert loop)
  monolithic_cpu    the oracle answers CPU; forward_monolithic_cpu calls CPUFusedMOE
  apply_monolithic  the oracle answers (CPU, None); apply_monolithic calls CPUFusedMOE
  cpu_experts       CPUFusedMOE is gone: the oracle answers (CPU, CPUUnquantizedExperts), vLLM's
                    CPU routing and modular kernel run, and the C++ kernels they call
                    (cpu_prepack_moe_weight, cpu_fused_moe) are stood in by `torch_experts`

(vLLM 0.12-0.14, 0.15-0.19, 0.20-0.27 and 0.28-0.33 respectively, as measured.) Standard library
only at module level, like the family modules.
"""

from typing import Any

from . import apply_monolithic, cpu_experts, forward_cpu, monolithic_cpu

PATHS = (forward_cpu, monolithic_cpu, apply_monolithic, cpu_experts)
NONE_FITS = ("mixture of experts: vLLM's real FusedMoE layers, but this vLLM keeps its CPU expert path where no "
             "stand-in fits (the self-check names what is missing)")
# Config keys that give a model routed experts (Qwen-MoE, DeepSeek/Kimi, gpt-oss and Mixtral).
EXPERT_KEYS = ("num_experts", "n_routed_experts", "num_local_experts")
_INSTALLED: list[Any] = []


def path():
    """The module of the CPU expert path this vLLM has, or None."""
    return next((p for p in PATHS if p.fits()), None)


def in_config(text_config):
    """Whether the (text) config has routed experts: only then is the stand-in installed and
    checked, so a dense model does not depend on how this vLLM lays out its MoE code."""
    return any((text_config.get(key) or 0) > 0 for key in EXPERT_KEYS)


def stood_in(experts):
    """The STOOD_IN line for a model with routed experts ([] for one without)."""
    if not experts:
        return []
    found = path()
    return [found.STOOD_IN if found is not None else NONE_FITS]


def install():
    """Before the model is built: what the path needs in place (the backend oracle's answer)."""
    found = path()
    if found is not None:
        found.install()
        _INSTALLED[:] = [found]


def after_weights(model, vllm_config):
    """Once the weights exist and the CustomOps run forward_native: every unquantized FusedMoE
    layer runs vLLM's CPU expert path (built under the model's config: it builds CustomOps)."""
    if not _INSTALLED:
        return 0
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.layers.fused_moe.unquantized_fused_moe_method import UnquantizedFusedMoEMethod

    found, n = _INSTALLED[0], 0
    with set_current_vllm_config(vllm_config):
        for layer in model.modules():
            qm = getattr(layer, "quant_method", None)
            if isinstance(qm, UnquantizedFusedMoEMethod):
                found.after_weights(layer, qm, vllm_config)
                n += 1
    return n


def self_check(run):
    found = path()
    if found is None:
        run.check("MoE stand-in vs UnquantizedFusedMoEMethod", False,
                  "this vLLM has none of the CPU expert paths the stand-in knows: "
                  + "; ".join(f"{p.__name__.rsplit('.', 1)[-1]}: {p.missing()}" for p in PATHS))
    found.self_check(run)


def is_expert_layer(module):
    """Whether `module` is an expert layer by its role (its quant method is vLLM's
    FusedMoEMethodBase), whatever vLLM names the class (FusedMoE, SharedFusedMoE, RoutedExperts)."""
    qm = getattr(module, "quant_method", None)
    return any(c.__name__ == "FusedMoEMethodBase" for c in type(qm).__mro__) if qm is not None else False

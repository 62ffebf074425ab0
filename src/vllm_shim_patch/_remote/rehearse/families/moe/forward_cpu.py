"""No backend oracle yet (vLLM 0.12-0.14): UnquantizedFusedMoEMethod picks forward_cpu as its
forward_native only on a CPU platform (at class creation), and forward_cpu calls the layer's
cpu_fused_moe, vLLM's CPUFusedMOE. Once the weights exist, each layer gets its CPUFusedMOE and
the method dispatches to forward_cpu (after the runner selected forward_native for every CustomOp,
which would select forward_cuda here)."""

from . import base

STOOD_IN = (
    "mixture of experts: vLLM's real FusedMoE layers with vLLM's own CPU path (UnquantizedFusedMoEMethod "
    "dispatches to forward_cpu, which calls vllm.model_executor.layers.fused_moe.cpu_fused_moe.CPUFusedMOE: "
    "routing and experts in torch)"
)


def missing():
    method = base.method()
    return base.first_missing(
        ("no backend oracle", not base.has_module(base.ORACLE)),
        ("UnquantizedFusedMoEMethod.forward_cpu", method is not None and hasattr(method, "forward_cpu")),
        ("fused_moe.cpu_fused_moe", base.has_module(base.CPU_FUSED_MOE)))


def fits():
    return missing() is None


def install():
    """Nothing before the model is built: the layer gets its path once its weights exist."""


def after_weights(layer, qm, vllm_config):
    layer.cpu_fused_moe = base.cpu_fused_moe(layer, vllm_config)
    qm._forward_method = qm.forward_cpu


def self_check(run):
    from ...selfcheck import code_names

    method = base.method()
    run.check("MoE stand-in vs UnquantizedFusedMoEMethod.forward_cpu",
              "cpu_fused_moe" in code_names(method.forward_cpu),
              "forward_cpu no longer calls the layer's cpu_fused_moe")
    base.check_cpu_fused_moe(run)

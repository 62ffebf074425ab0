"""The backend oracle answers one backend (vLLM 0.15-0.19): answered CPU, the method is
monolithic through forward_monolithic_cpu, which calls its cpu_fused_moe, vLLM's CPUFusedMOE."""

from . import base

STOOD_IN = (
    "mixture of experts: vLLM's real FusedMoE layers with vLLM's own CPU path (the backend oracle answers "
    "CPU; routing and experts by vllm.model_executor.layers.fused_moe.cpu_fused_moe.CPUFusedMOE in torch, "
    "through UnquantizedFusedMoEMethod.forward_monolithic_cpu)"
)


def missing():
    method = base.method()
    return base.first_missing(
        ("fused_moe.oracle.unquantized", base.has_module(base.ORACLE)),
        ("UnquantizedFusedMoEMethod.forward_monolithic_cpu",
         method is not None and hasattr(method, "forward_monolithic_cpu")),
        ("fused_moe.cpu_fused_moe", base.has_module(base.CPU_FUSED_MOE)))


def fits():
    return missing() is None


def install():
    from vllm.model_executor.layers.fused_moe.oracle.unquantized import UnquantizedMoeBackend

    base.answer_oracle(lambda: UnquantizedMoeBackend.CPU)


def after_weights(layer, qm, vllm_config):
    qm._is_monolithic = True
    qm.apply_monolithic = qm.forward_monolithic_cpu
    qm.cpu_fused_moe = base.cpu_fused_moe(layer, vllm_config)


def self_check(run):
    from ...selfcheck import code_names

    method = base.method()
    run.check("MoE stand-in vs UnquantizedFusedMoEMethod.forward_monolithic_cpu",
              hasattr(method, "is_monolithic") and "cpu_fused_moe" in code_names(method.forward_monolithic_cpu),
              "forward_monolithic_cpu no longer calls self.cpu_fused_moe, or the method has no is_monolithic")
    base.check_oracle(run, answers_pair=False)
    base.check_cpu_fused_moe(run)

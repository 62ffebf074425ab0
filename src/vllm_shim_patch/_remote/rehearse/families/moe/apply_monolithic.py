"""The backend oracle answers a (backend, experts class) pair (vLLM 0.20-0.27): answered
(CPU, None), the method is monolithic (its is_monolithic property says so for CPU) and its
apply_monolithic calls its cpu_fused_moe, vLLM's CPUFusedMOE, which vLLM's own
process_weights_after_loading would build on a CPU box without AMX."""

from . import base

STOOD_IN = (
    "mixture of experts: vLLM's real FusedMoE layers with vLLM's own CPU path (the backend oracle answers "
    "(CPU, None); UnquantizedFusedMoEMethod.apply_monolithic calls "
    "vllm.model_executor.layers.fused_moe.cpu_fused_moe.CPUFusedMOE: routing and experts in torch)"
)


def missing():
    method = base.method()
    return base.first_missing(
        ("fused_moe.oracle.unquantized", base.has_module(base.ORACLE)),
        ("UnquantizedFusedMoEMethod.apply_monolithic", method is not None and "apply_monolithic" in vars(method)),
        ("fused_moe.cpu_fused_moe", base.has_module(base.CPU_FUSED_MOE)))


def fits():
    return missing() is None


def install():
    from vllm.model_executor.layers.fused_moe.oracle.unquantized import UnquantizedMoeBackend

    base.answer_oracle(lambda: (UnquantizedMoeBackend.CPU, None))


def after_weights(layer, qm, vllm_config):
    qm.cpu_fused_moe = base.cpu_fused_moe(layer, vllm_config)


def self_check(run):
    from ...selfcheck import code_names

    method = base.method()
    run.check("MoE stand-in vs UnquantizedFusedMoEMethod.apply_monolithic",
              "cpu_fused_moe" in code_names(method.apply_monolithic) and isinstance(
                  vars(method).get("is_monolithic"), property),
              "apply_monolithic no longer calls self.cpu_fused_moe, or is_monolithic is no property")
    base.check_oracle(run, answers_pair=True)
    base.check_cpu_fused_moe(run)

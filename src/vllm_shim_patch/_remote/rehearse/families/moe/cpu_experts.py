"""CPUFusedMOE is gone (vLLM 0.28-): the CPU backend is vLLM's modular kernel with
CPUUnquantizedExperts, whose C++ kernels exist only in vLLM's CPU build. The oracle answers
(CPU, CPUUnquantizedExperts) as on a CPU platform; vLLM's own process_weights_after_loading builds
the kernel once the weights exist; vLLM's CPU routing runs (0.28-0.29: the monolithic experts'
select_experts; 0.30-: the CPURouter, which create_fused_moe_router picks only when
current_platform.is_cpu(), answered True for that one call); the two C++ wrappers cpu_moe imported
by name (cpu_prepack_moe_weight, cpu_fused_moe; from vllm._custom_ops, and from 0.34 vllm._cpu_ops)
answer in torch (`torch_experts`)."""

from . import base, torch_experts

STOOD_IN = (
    "mixture of experts: vLLM's real FusedMoE layers with vLLM's CPU backend (the oracle answers CPU with "
    "CPUUnquantizedExperts; vLLM's CPU routing and modular kernel run); the C++ kernels it calls "
    "(cpu_prepack_moe_weight, cpu_fused_moe: vllm._custom_ops', from 0.34 vllm._cpu_ops') stood in by a torch "
    "expert loop, the arithmetic of vLLM's own torch path (vLLM's CPU build is not installed)"
)
KERNELS = ("cpu_fused_moe", "cpu_prepack_moe_weight")
_REAL: dict[str, object] = {}  # the kernels cpu_moe imported, by name (install keeps them)


def missing():
    if not base.has_module(base.CPU_EXPERTS):
        return "fused_moe.experts.cpu_moe"
    import importlib

    cpu_moe = importlib.import_module(base.CPU_EXPERTS)
    return base.first_missing(
        ("fused_moe.oracle.unquantized", base.has_module(base.ORACLE)),
        ("experts.cpu_moe.CPUUnquantizedExperts", hasattr(cpu_moe, "CPUUnquantizedExperts")),
        *((f"experts.cpu_moe.{name}", hasattr(cpu_moe, name)) for name in KERNELS))


def fits():
    return missing() is None


def install():
    from vllm.model_executor.layers.fused_moe.experts import cpu_moe
    from vllm.model_executor.layers.fused_moe.oracle.unquantized import UnquantizedMoeBackend

    for name in KERNELS:
        _REAL.setdefault(name, getattr(cpu_moe, name))
    cpu_moe.cpu_prepack_moe_weight = torch_experts.cpu_prepack_moe_weight
    cpu_moe.cpu_fused_moe = torch_experts.kernel(in_place="out" in _parameters(_REAL["cpu_fused_moe"]))
    base.answer_oracle(lambda: (UnquantizedMoeBackend.CPU, cpu_moe.CPUUnquantizedExperts))
    _cpu_router()


def _parameters(fn):
    import inspect

    return list(inspect.signature(fn).parameters)


def _cpu_router():
    """vLLM 0.30+: the layer's router from create_fused_moe_router (imported by name into the
    layer module), with current_platform.is_cpu() answering True for that call only."""
    from vllm.model_executor.layers.fused_moe import layer as layer_module
    from vllm.platforms import current_platform

    from ...selfcheck import code_names

    real = getattr(layer_module, "create_fused_moe_router", None)
    if real is None or "is_cpu" not in code_names(real):
        return  # 0.28-0.29: the monolithic CPU experts route themselves
    _REAL.setdefault("create_fused_moe_router", real)

    def create_fused_moe_router(*args, **kwargs):
        saved = current_platform.__dict__.get("is_cpu")
        current_platform.is_cpu = lambda: True
        try:
            return real(*args, **kwargs)
        finally:
            if saved is None:
                del current_platform.is_cpu
            else:
                current_platform.is_cpu = saved

    layer_module.create_fused_moe_router = create_fused_moe_router


def after_weights(layer, qm, vllm_config):
    # vLLM's own: the modular kernel (prepare/finalize, CPUUnquantizedExperts) built, the experts'
    # weights prepacked (by the stand-in: as they are).
    qm.process_weights_after_loading(layer)


def self_check(run):
    """Against the kernels cpu_moe imported (install keeps them): vllm._custom_ops' up to 0.33,
    vllm._cpu_ops' from 0.34, each named by its own module."""
    import importlib

    from vllm.model_executor.layers.fused_moe.experts import cpu_moe

    for name in KERNELS:
        home = _REAL[name].__module__ if name in _REAL else "vllm._custom_ops"
        real = getattr(importlib.import_module(home), name, None)
        ours = _parameters(getattr(cpu_moe, name))
        wanted = _parameters(real) if real is not None else f"no {name} in {home}"
        run.check(f"MoE stand-in {name} vs {home}.{name}", wanted == ours, f"{wanted} != {ours}")
    from ...selfcheck import code_names

    apply = cpu_moe.CPUUnquantizedExperts.apply
    run.check("MoE stand-in cpu_fused_moe vs CPUUnquantizedExperts.apply", "cpu_fused_moe" in code_names(apply),
              "CPUUnquantizedExperts.apply no longer calls cpu_fused_moe")
    base.check_oracle(run, answers_pair=True)

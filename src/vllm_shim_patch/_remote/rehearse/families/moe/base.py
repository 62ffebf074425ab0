"""What the CPU expert paths share: where vLLM keeps the pieces, asked without importing more
than needed, and the checks more than one path makes."""

METHOD = "vllm.model_executor.layers.fused_moe.unquantized_fused_moe_method"
ORACLE = "vllm.model_executor.layers.fused_moe.oracle.unquantized"
CPU_FUSED_MOE = "vllm.model_executor.layers.fused_moe.cpu_fused_moe"
CPU_EXPERTS = "vllm.model_executor.layers.fused_moe.experts.cpu_moe"


def has_module(name):
    """Whether vLLM has the module (found, not imported)."""
    import importlib.util

    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


def method():
    """UnquantizedFusedMoEMethod (None where vLLM has no such module)."""
    import importlib

    if not has_module(METHOD):
        return None
    return getattr(importlib.import_module(METHOD), "UnquantizedFusedMoEMethod", None)


def first_missing(*needs):
    """The first of (what, present) that is not present, as words; None when all are."""
    return next((what for what, present in needs if not present), None)


def answer_oracle(answer):
    """UnquantizedFusedMoEMethod's backend oracle answers `answer` (what it answers on a CPU
    platform): the method module asks it by the name it imported."""
    import importlib

    module = importlib.import_module(METHOD)

    def select_unquantized_moe_backend(*args, **kwargs):
        return answer()

    # The stand-in names what it replaces (its self-check reads it); vLLM's module is untyped here.
    select_unquantized_moe_backend.stands_in_for = module.select_unquantized_moe_backend  # type: ignore[attr-defined]
    module.select_unquantized_moe_backend = select_unquantized_moe_backend  # type: ignore[attr-defined]


def check_oracle(run, answers_pair):
    """The oracle is still asked by name in the method module, and answers one backend or a
    (backend, experts class) pair as the stand-in does."""
    import importlib
    import inspect

    module = importlib.import_module(METHOD)
    ours = getattr(module, "select_unquantized_moe_backend", None)
    real = getattr(ours, "stands_in_for", None)
    names = getattr(module.UnquantizedFusedMoEMethod.__init__, "__code__", None)
    asked = names is not None and "select_unquantized_moe_backend" in names.co_names
    returns = str(inspect.signature(real).return_annotation) if real is not None else ""
    run.check("MoE stand-in oracle vs select_unquantized_moe_backend",
              real is not None and asked and returns.startswith("tuple") == answers_pair,
              f"UnquantizedFusedMoEMethod.__init__ asks the oracle: {asked}; it returns {returns or '?'}")


def check_cpu_fused_moe(run):
    """vLLM's CPUFusedMOE is built from the layer alone, as the stand-in builds it."""
    import inspect

    from vllm.model_executor.layers.fused_moe import cpu_fused_moe

    params = list(inspect.signature(cpu_fused_moe.CPUFusedMOE.__init__).parameters)
    run.check("MoE stand-in vs CPUFusedMOE.__init__", params == ["self", "layer"],
              str(inspect.signature(cpu_fused_moe.CPUFusedMOE.__init__)))


def cpu_fused_moe(layer, vllm_config):
    """vLLM's CPUFusedMOE for `layer`, each call under the model's config: its torch loop builds
    vLLM's SiluAndMul CustomOp per call (0.24-0.27), which asks get_current_vllm_config() (set by
    no forward of the GPU runner; a CPU box takes the grouped-GEMM kernel instead)."""
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.layers.fused_moe import cpu_fused_moe as module

    fused = module.CPUFusedMOE(layer)

    def call(*args, **kwargs):
        with set_current_vllm_config(vllm_config):
            return fused(*args, **kwargs)

    call.stands_in_for = fused  # type: ignore[attr-defined]  # what it replaces, for its self-check
    return call

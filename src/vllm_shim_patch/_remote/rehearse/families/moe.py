"""The mixture-of-experts stand-in: vLLM's own CPU expert path for its real FusedMoE layers.

vLLM picks the unquantized MoE backend by platform; a machine without a GPU is no platform the
oracle knows, and the CUDA kernels (`_moe_C::topk_softmax`, Triton) do not run on CPU. The layers
are built as on a CPU platform (the oracle answers its CPU backend) and run monolithic through
vLLM's own `CPUFusedMOE` (its torch routing, `grouped_topk` included, and its torch expert loop).
"""

STOOD_IN = (
    "mixture of experts: vLLM's real FusedMoE layers with vLLM's own CPU path (the backend oracle answers "
    "CPU; routing and experts by vllm.model_executor.layers.fused_moe.cpu_fused_moe.CPUFusedMOE in torch)"
)


def present():
    """Whether this vLLM picks its MoE backend by an oracle (0.16 does; 0.12 has no such module:
    there the stand-in is not needed to build a dense model, and a MoE one reaches vLLM's CUDA
    path, which the rehearsal reports as a stand-in gap)."""
    import importlib.util

    try:
        return importlib.util.find_spec("vllm.model_executor.layers.fused_moe.oracle.unquantized") is not None
    except ModuleNotFoundError:
        return False


# Config keys that give a model routed experts (Qwen-MoE, DeepSeek/Kimi, gpt-oss and Mixtral).
EXPERT_KEYS = ("num_experts", "n_routed_experts", "num_local_experts")
_INSTALLED = []


def in_config(text_config):
    """Whether the (text) config has routed experts: only then is the stand-in installed and
    checked, so a dense model does not depend on how this vLLM lays out its MoE code."""
    return any((text_config.get(key) or 0) > 0 for key in EXPERT_KEYS)


def install():
    """Before the model is built: the backend oracle answers CPU (it has no answer off a GPU).
    False where this vLLM has no oracle (nothing installed)."""
    if not present():
        return False
    _INSTALLED.append(True)
    from vllm.model_executor.layers.fused_moe import unquantized_fused_moe_method as method
    from vllm.model_executor.layers.fused_moe.oracle.unquantized import UnquantizedMoeBackend

    def select_unquantized_moe_backend(*args, **kwargs):
        return UnquantizedMoeBackend.CPU

    method.select_unquantized_moe_backend = select_unquantized_moe_backend
    return True


def after_weights(model):
    """Once the weights exist: every unquantized FusedMoE layer runs vLLM's CPU expert path."""
    if not _INSTALLED:
        return 0
    from vllm.model_executor.layers.fused_moe import cpu_fused_moe
    from vllm.model_executor.layers.fused_moe.unquantized_fused_moe_method import UnquantizedFusedMoEMethod

    n = 0
    for layer in model.modules():
        qm = getattr(layer, "quant_method", None)
        if isinstance(qm, UnquantizedFusedMoEMethod):
            qm._is_monolithic = True
            qm.apply_monolithic = qm.forward_monolithic_cpu
            qm.cpu_fused_moe = cpu_fused_moe.CPUFusedMOE(layer)
            n += 1
    return n


def self_check(run):
    import inspect

    from vllm.model_executor.layers.fused_moe import cpu_fused_moe, unquantized_fused_moe_method as method

    run.check("MoE stand-in vs UnquantizedFusedMoEMethod",
              all(hasattr(method.UnquantizedFusedMoEMethod, a) for a in ("forward_monolithic_cpu", "is_monolithic"))
              and "select_unquantized_moe_backend" in vars(method),
              "UnquantizedFusedMoEMethod has no CPU monolithic path or backend oracle")
    run.check("MoE stand-in vs CPUFusedMOE.__init__",
              list(inspect.signature(cpu_fused_moe.CPUFusedMOE.__init__).parameters) == ["self", "layer"],
              str(inspect.signature(cpu_fused_moe.CPUFusedMOE.__init__)))

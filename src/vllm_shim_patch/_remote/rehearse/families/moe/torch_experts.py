"""vLLM's CPU expert kernels (`vllm._custom_ops.cpu_fused_moe`, `cpu_prepack_moe_weight`, C++
ops of vLLM's CPU build) answered in torch: the arithmetic of vLLM's own torch expert loop
(`cpu_fused_moe_torch`, vLLM 0.16-0.27), with vLLM's own torch forms of the activations."""


def cpu_prepack_moe_weight(weight, isa):
    return weight  # the torch loop reads the [experts, out, in] layout as created


def kernel(in_place):
    """cpu_fused_moe as vLLM calls it: writing into `out` (0.30+) or returning the result."""
    if in_place:
        def cpu_fused_moe(out, input, w13, w2, w13_bias, w2_bias, topk_weights, topk_ids, act, isa,
                          skip_weighted=False):
            out.copy_(experts(input, w13, w2, w13_bias, w2_bias, topk_weights, topk_ids, act, skip_weighted))
    else:
        # Two signatures on purpose, one per vLLM calling convention (mypy wants one).
        def cpu_fused_moe(input, w13, w2, w13_bias, w2_bias, topk_weights, topk_ids, act, isa,  # type: ignore[misc]
                          skip_weighted=False):
            return experts(input, w13, w2, w13_bias, w2_bias, topk_weights, topk_ids, act, skip_weighted)
    return cpu_fused_moe


def activation(act):
    """vLLM's torch form of a MoE activation (its CustomOp's forward_native)."""
    import inspect
    import types

    from vllm.model_executor.layers import activation as ops

    classes = {"silu": "SiluAndMul", "swigluoai": "SwigluOAIAndMul"}
    cls = getattr(ops, classes.get(act, ""), None)
    if cls is None:
        from ...answer import CannotRehearse

        raise CannotRehearse(f"the stand-in cpu_fused_moe has no activation {act!r}")
    native = inspect.getattr_static(cls, "forward_native")
    if isinstance(native, staticmethod):
        return cls.forward_native
    # forward_native reads only the op's constants: SwigluOAIAndMul's defaults, as gpt-oss builds it
    # (building the CustomOp itself would ask for a current vLLM config, which a forward has not).
    op = types.SimpleNamespace(alpha=1.702, limit=7.0)
    return lambda x: native(op, x)


def experts(x, w13, w2, w13_bias, w2_bias, topk_weights, topk_ids, act, skip_weighted):
    """Each token through its top-k experts, weighted by its routing weights (already applied to
    the input when skip_weighted), summed."""
    import torch
    import torch.nn.functional as F

    fn = activation(act)
    out = torch.zeros(x.shape[0], w2.shape[1], dtype=torch.float32)
    ids = topk_ids.long()
    for e in ids.unique().tolist():
        rows, slot = (ids == e).nonzero(as_tuple=True)
        h = F.linear(x[rows], w13[e], None if w13_bias is None else w13_bias[e])
        h = F.linear(fn(h), w2[e], None if w2_bias is None else w2_bias[e])
        weight = 1.0 if skip_weighted else topk_weights[rows, slot].float().unsqueeze(-1)
        out.index_add_(0, rows, h.float() * weight)
    return out.to(x.dtype)

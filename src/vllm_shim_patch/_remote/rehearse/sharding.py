"""Weights by parameter name: every parameter drawn whole (its unsharded shape, in vLLM's own
fused layout) from a generator seeded by its name, and handed to the parameter's own
`weight_loader`, which takes this rank's shard as it would from a checkpoint.

WHY: vLLM's dummy initializer seeds every parameter alike and draws its LOCAL (sharded) shape, so
rank 0's and rank 1's shards hold the same numbers: no unsharded model computes what such a
sharded one does. Drawn whole by name, the shards of every rank are slices of one model, and the
same loaders at tensor parallel 1 copy the whole tensor: the reference is that one model.

Imports vLLM and torch inside the functions only (imported by `families.common.init_weights`).
"""

import functools
import zlib


def full_shape(module, param):
    """The parameter's shape in the unsharded model (fused q/k/v and gate/up as vLLM lays them out):
    what a checkpoint tensor for it has before vLLM's loader takes this rank's shard."""
    from vllm.model_executor.layers import linear
    from vllm.model_executor.layers.vocab_parallel_embedding import VocabParallelEmbedding

    shape = list(param.shape)
    out_dim = getattr(param, "output_dim", None)
    in_dim = getattr(param, "input_dim", None)
    if isinstance(module, linear.QKVParallelLinear) and out_dim is not None:
        # The total head counts, not output_size: with replicated KV heads (tensor parallel above
        # the KV head count) that is inflated. vLLM 0.12 has no v_head_size (it is head_size).
        v_head = getattr(module, "v_head_size", module.head_size)
        shape[out_dim] = ((module.total_num_heads + module.total_num_kv_heads) * module.head_size
                          + module.total_num_kv_heads * v_head)
    elif isinstance(module, linear.MergedColumnParallelLinear) and out_dim is not None:
        shape[out_dim] = sum(module.output_sizes)
    elif isinstance(module, linear.ColumnParallelLinear) and out_dim is not None:
        shape[out_dim] = module.output_size
    elif isinstance(module, linear.RowParallelLinear) and in_dim is not None:
        shape[in_dim] = module.input_size
    elif isinstance(module, VocabParallelEmbedding) and out_dim is not None:
        shape[out_dim] = module.org_vocab_size
    return tuple(shape)


def full_tensor(name, shape, dtype, seed, width):
    """The same whole tensor for `name` in every process (uniform in +-width, norms near 1)."""
    import torch

    gen = torch.Generator().manual_seed(seed * 1_000_003 + zlib.crc32(name.encode()))
    t = torch.rand(shape, generator=gen, dtype=torch.float32)
    leaf = name.rsplit(".", 2)
    if len(leaf) >= 2 and "norm" in leaf[-2] and name.endswith("weight"):
        return t.mul_(0.4).add_(0.8).to(dtype)  # norms near 1, as in a trained model
    return t.mul_(2 * width).sub_(width).to(dtype)


def is_fused_moe(module):
    # vLLM 0.34's FusedMoEFactory builds RoutedExperts, which has no FusedMoE in its classes.
    return any(c.__name__ in ("FusedMoE", "RoutedExperts") for c in type(module).__mro__)


def moe_tp_size(module):
    """The ranks a MoE layer's intermediate size is split over (RoutedExperts: in its moe_config)."""
    size = getattr(module, "tp_size", None)
    return size if size is not None else module.moe_config.tp_size


def load(model, seed, width):
    """Every parameter of `model` through its own loader, from its whole tensor (`full_tensor`'s
    seed and width); a tied parameter (lm_head = embed_tokens) once, under its first name."""
    import torch

    from vllm.model_executor.model_loader.weight_utils import default_weight_loader

    draw = functools.partial(full_tensor, seed=seed, width=width)
    seen: set[int] = set()
    with torch.no_grad():
        for mname, module in model.named_modules():
            if is_fused_moe(module):
                _load_experts(module, mname, seen, draw)
                continue
            for pname, param in module.named_parameters(recurse=False):
                if id(param) in seen:
                    continue
                seen.add(id(param))
                name = f"{mname}.{pname}" if mname else pname
                loader = getattr(param, "weight_loader", default_weight_loader)
                loader(param, draw(name, full_shape(module, param), param.dtype))


def _load_experts(module, mname, seen, draw):
    """FusedMoE keeps w13 = [gate; up] and w2 for every expert, each rank a slice of the
    intermediate size; its loader takes one checkpoint tensor per (expert, w1|w2|w3)."""
    inter = module.intermediate_size_per_partition * moe_tp_size(module)
    hidden = module.hidden_size
    for pname, param in module.named_parameters(recurse=False):
        seen.add(id(param))
        if pname not in ("w13_weight", "w2_weight"):
            if pname.endswith("_bias") and pname.startswith(("w13", "w2")):
                raise NotImplementedError(f"the stand-in sharding.load draws no per-expert biases ({mname}.{pname})")
            # Replicated on every rank (DeepSeek's e_score_correction_bias): the whole tensor.
            param.data.copy_(draw(f"{mname}.{pname}", tuple(param.shape), param.dtype))
    for e in range(module.global_num_experts):
        for shard, shape, pname in (("w1", (inter, hidden), "w13_weight"), ("w3", (inter, hidden), "w13_weight"),
                                    ("w2", (hidden, inter), "w2_weight")):
            param = getattr(module, pname)
            name = f"{mname}.experts.{e}.{shard}.weight"
            param.weight_loader(param, draw(name, shape, param.dtype), name, shard_id=shard, expert_id=e)


def full_shapes(model):
    """{parameter name: [local shape, whole shape]} of this rank's model (checked against the
    unsharded reference's shapes: each shard's whole is that model's parameter)."""
    out = {}
    for mname, module in model.named_modules():
        for pname, param in module.named_parameters(recurse=False):
            full = list(full_shape(module, param))
            if is_fused_moe(module):
                inter = module.intermediate_size_per_partition * moe_tp_size(module)
                full = ([module.global_num_experts, 2 * inter, module.hidden_size] if pname == "w13_weight"
                        else [module.global_num_experts, module.hidden_size, inter] if pname == "w2_weight"
                        else list(param.shape))
            out[f"{mname}.{pname}" if mname else pname] = [list(param.shape), full]
    return out


def shapes(model):
    """{parameter name: shape} of the unsharded model."""
    return {f"{m}.{p}" if m else p: list(t.shape) for m, mod in model.named_modules()
            for p, t in mod.named_parameters(recurse=False)}

"""What every family shares: shrinking a config, registering classes in-process, the model's own
forward with hooks (the reference), weights wide enough that attention is not uniform."""

import collections
import copy
import math

# The tiny model's sizes. Heads and head size keep grouped-query attention (2 query heads per KV head).
HIDDEN = 64
INTERMEDIATE = 128
HEADS = 4
KV_HEADS = 2
HEAD_DIM = 16
LAYERS = 4
VOCAB = 128
# Dummy weights of +-1e-3 (vLLM's default) make every attention softmax uniform: a forward that
# drops a scaling of q would still match. +-WIDTH with norms near 1 gives peaked attention.
WIDTH = 0.3
SEED = 1234
# A family's FIRST_RELEASE for an architecture already in vLLM 0.10.0, the oldest release whose
# model registry was read for the table (each release's registry.py, 0.10.0-0.33.0).
SURVEYED_FIRST = "0.10.0 or earlier"
# Keys a config may carry that size the model; everything else (its architecture) is kept.
_SIZES = {
    "hidden_size": HIDDEN, "intermediate_size": INTERMEDIATE, "num_attention_heads": HEADS,
    "head_dim": HEAD_DIM,
}


def shrink(config, max_model_len, *, vocab=None, layers=LAYERS):
    """A copy of `config` with its sizes shrunk and its structure kept."""
    out = copy.deepcopy(config)
    for key, value in _SIZES.items():
        if key in out or key in ("hidden_size", "num_attention_heads"):
            out[key] = value
    heads = config.get("num_attention_heads") or HEADS
    kv = config.get("num_key_value_heads")
    # Keep the kind of attention: multi-head stays multi-head, grouped stays grouped.
    out["num_key_value_heads"] = HEADS if kv is None or kv >= heads else KV_HEADS
    total = int(config.get("num_hidden_layers") or layers)
    out["num_hidden_layers"] = min(total, layers)
    if isinstance(config.get("layer_types"), list):  # per-layer attention kinds (full / sliding)
        out["layer_types"] = config["layer_types"][:out["num_hidden_layers"]]
    if vocab is not None:
        out["vocab_size"] = vocab
        # The word-level tokenizer's <unk>, <s>, </s>: a published id past the tiny vocabulary
        # (gpt-oss pads with 199999) would not be a token of it.
        for key, tiny in (("pad_token_id", 0), ("bos_token_id", 1), ("eos_token_id", 2)):
            if isinstance(out.get(key), int) and out[key] >= vocab:
                out[key] = tiny
    out["max_position_embeddings"] = max(int(config.get("max_position_embeddings") or 0), max_model_len)
    out["torch_dtype"] = "float32"
    out.pop("dtype", None)
    out.pop("quantization_config", None)
    return out


# The sizes vLLM splits across tensor parallel ranks (each rank a slice of the heads or of the
# MLP's columns); the hidden size, the latent ranks and the vocabulary (padded) are not split.
_SPLIT = ("num_attention_heads", "num_heads", "intermediate_size", "moe_intermediate_size")


def for_ranks(config, ranks):
    """The shrunk `config` with enough of every split size for `ranks` tensor parallel ranks (its
    sub-configs too: a vision tower is sharded as the language model is): each widened to the
    least multiple of `ranks`, so each rank holds a whole share as on the real model. Grouped KV
    heads stay where vLLM can split or replicate them; KV heads equal to the query heads (multi-head,
    MLA) are widened with them."""
    out = copy.deepcopy(config)
    for part in [out, *(v for v in out.values() if isinstance(v, dict))]:
        heads = part.get("num_attention_heads")  # vision configs that say num_heads have no KV heads
        for key in _SPLIT:
            size = part.get(key)
            if isinstance(size, int) and size > 0 and size % ranks:
                part[key] = size * ranks // math.gcd(size, ranks)
        kv = part.get("num_key_value_heads")
        if isinstance(heads, int) and isinstance(kv, int) and kv > 0:
            if kv == heads:
                part["num_key_value_heads"] = part["num_attention_heads"]
            elif kv % ranks and ranks % kv:
                part["num_key_value_heads"] = kv * ranks // math.gcd(kv, ranks)
    return out


def no_files(config):
    """A family's `files` default: nothing besides config.json and a tokenizer."""
    return {}


def no_special_tokens(config):
    """A family's `special_tokens` default: no token the tokenizer must know by id."""
    return None


def no_self_check(run, model):
    """A family's `self_check` default: no stand-ins of its own to check."""


def register_in_process(modules):
    """vLLM inspects a lazily registered architecture in a subprocess ("to avoid initializing
    CUDA"), about 6 s here, unless ~/.cache/vllm/modelinfos has it. There is no CUDA to protect and
    the rehearsal spawns no processes: register the family's already-imported classes, so vLLM's own
    _ModelInfo.from_model_cls inspects them in-process."""
    from vllm.model_executor.models import registry

    names = {m.__name__: m for m in modules}
    for arch, entry in list(registry.ModelRegistry.models.items()):
        module = names.get(getattr(entry, "module_name", None))
        if module is not None and hasattr(module, entry.class_name):
            registry.ModelRegistry.models[arch] = registry._RegisteredModel.from_model_cls(
                getattr(module, entry.class_name))


def init_weights(model, model_config, by_name=False):
    """vLLM's own dummy initializer, drawn +-WIDTH; norm weights near 1 as in a trained model.

    `by_name`: each parameter drawn whole from its name instead and handed to its own weight
    loader (`sharding`), so the shards of many ranks are slices of one model."""
    if by_name:
        from .. import sharding

        return sharding.load(model, SEED, WIDTH)
    import inspect

    import torch

    from vllm.model_executor.model_loader import weight_utils

    init = getattr(weight_utils, "initialize_dummy_weights", None)
    params = inspect.signature(init).parameters if init is not None else {}
    if init is not None and "model_config" in params:
        init(model, model_config, low=-WIDTH, high=WIDTH, seed=SEED)
    elif init is not None and "low" in params:
        init(model, low=-WIDTH, high=WIDTH, seed=SEED)
    else:
        gen = torch.Generator().manual_seed(SEED)
        for p in model.state_dict().values():
            if torch.is_floating_point(p):
                p.copy_(torch.rand(p.shape, generator=gen, dtype=torch.float32).mul_(2 * WIDTH).sub_(WIDTH))
    gen = torch.Generator().manual_seed(SEED + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name.rsplit(".", 2)[-2] and name.endswith("weight"):
                p.copy_(torch.rand(p.shape, generator=gen).mul_(0.4).add_(0.8))


def layer_output(output):
    """The residual stream after a decoder layer: hidden + residual where the layer returns both."""
    if isinstance(output, tuple):
        hidden, residual = output[0], output[1] if len(output) > 1 else None
        return hidden if residual is None else hidden + residual
    return output


class _Deepest(Exception):
    """The deepest layer the reference reads has run: the forward ends there."""


class _Unhooked:
    """The model exactly as vLLM built it, for the reference forward: speculators' forward bound on
    the instance and every hook (speculators' capture) taken off, our own capture hooks on."""

    _HOOKS = ("_forward_hooks", "_forward_pre_hooks", "_forward_hooks_with_kwargs",
              "_forward_pre_hooks_with_kwargs", "_forward_hooks_always_called")

    def __init__(self, model, base, layers):
        self.model, self.base, self.layers = model, base, layers
        self.captured = {}

    def __enter__(self):
        from torch.nn.modules import module as torch_module

        self.saved = []
        for m in self.model.modules():
            self.saved.append((m, {h: getattr(m, h) for h in self._HOOKS if hasattr(m, h)},
                               m.__dict__.pop("forward", None)))
            for h in self._HOOKS:
                if hasattr(m, h):
                    setattr(m, h, collections.OrderedDict())
        self.saved_global = {}
        for g in ("_global_forward_hooks", "_global_forward_pre_hooks", "_global_forward_hooks_always_called"):
            if hasattr(torch_module, g):
                self.saved_global[g] = getattr(torch_module, g)
                setattr(torch_module, g, collections.OrderedDict())
        self.handles = []
        last = max(self.layers, default=None)
        for i in self.layers:
            def hook(_module, _args, output, i=i):
                self.captured[i] = layer_output(output).float().clone()
                if i == last:
                    # A decoder layer's output depends on the layers below it only: the layers
                    # above, the final norm and the logits would change nothing read here.
                    raise _Deepest
            self.handles.append(self.base.layers[i].register_forward_hook(hook))
        return self

    def __exit__(self, *exc):
        from torch.nn.modules import module as torch_module

        for h in self.handles:
            h.remove()
        for m, hooks, forward in self.saved:
            for h, value in hooks.items():
                setattr(m, h, value)
            if forward is not None:
                m.forward = forward
        for g, value in self.saved_global.items():
            setattr(torch_module, g, value)
        return False


def reference_states(model, base, prompt, layers, forward):
    """The model's own forward over one prompt alone (a fresh KV cache), speculators' patch taken
    off, the residual stream after each requested decoder layer read by hooks: the independent
    reference each returned sequence is compared with."""
    import torch

    with torch.inference_mode(), _Unhooked(model, base, sorted(layers)) as taken:
        ids = torch.tensor(prompt, dtype=torch.long)
        pos = torch.arange(len(prompt), dtype=torch.long)
        try:
            forward(ids, pos, [("__reference__", 0, 0, len(prompt))], {})
        except _Deepest:
            pass
    return taken.captured

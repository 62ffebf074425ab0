"""Llama: vLLM's LlamaForCausalLM with only the attention module stood in."""

import functools
import inspect
import types

from ..selfcheck import sig

NAME = "llama"
ARCHITECTURES = ("LlamaForCausalLM",)
DESCRIPTION = "4-layer Llama"
VOCAB = 128
HIDDEN = 64
NUM_LAYERS = 4

REAL = [
    "vllm.model_executor.models.llama: LlamaForCausalLM, LlamaModel, LlamaDecoderLayer, LlamaMLP "
    "(built by vLLM's model registry + set_current_vllm_config), weights from vLLM's initialize_dummy_weights",
    "vllm.model_executor.layers: VocabParallelEmbedding, RMSNorm, SiluAndMul, Merged/RowParallelLinear, "
    "ParallelLMHead, LogitsProcessor (their forward_native paths)",
]
STOOD_IN = [
    "LlamaAttention: a CPU module with LlamaAttention's exact __init__/forward signatures (checked); it "
    "registers a KV-cache layer so the real get_kv_cache_spec finds it; no KV cache tensors, no attention "
    "backend (needs a GPU), per-token mixing only",
]


def config():
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": HIDDEN,
        "intermediate_size": 128,
        "num_hidden_layers": NUM_LAYERS,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": HIDDEN // 4,
        "hidden_act": "silu",
        "max_position_embeddings": 2048,
        "rms_norm_eps": 1e-5,
        "vocab_size": VOCAB,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
    }


def build():
    """The stand-ins this family needs, once vLLM imports: what the runner passes to the model."""
    import torch
    from torch import nn

    from vllm.model_executor.layers.attention_layer_base import AttentionLayerBase
    from vllm.model_executor.models import llama as vllm_llama
    from vllm.model_executor.models import registry as vllm_registry
    from vllm.utils.torch_utils import kv_cache_dtype_str_to_dtype
    from vllm.v1.kv_cache_interface import FullAttentionSpec

    class StandInKVLayer(nn.Module, AttentionLayerBase):
        """Registers in static_forward_context exactly like vLLM's Attention does, so the
        REAL GPUModelRunner.get_kv_cache_spec finds it and builds the real FullAttentionSpec.
        WHY a stand-in: vLLM's Attention picks a GPU attention backend at construction."""

        def __init__(self, num_kv_heads, head_size, prefix, cache_config, model_dtype):
            nn.Module.__init__(self)
            from vllm.config import get_current_vllm_config

            self.layer_name = prefix
            self.num_kv_heads = num_kv_heads
            self.head_size = head_size
            cache_dtype = cache_config.cache_dtype if cache_config is not None else "auto"
            self.kv_cache_torch_dtype = kv_cache_dtype_str_to_dtype(
                cache_dtype, get_current_vllm_config().model_config)
            ctx = get_current_vllm_config().compilation_config.static_forward_context
            if prefix in ctx:
                raise ValueError(f"Duplicate layer name: {prefix}")
            ctx[prefix] = self

        def get_attn_backend(self):  # no GPU attention backend on CPU
            raise NotImplementedError("stand-in attention has no backend")

        def get_kv_cache_spec(self, vllm_config):
            return FullAttentionSpec(
                block_size=vllm_config.cache_config.block_size,
                num_kv_heads=self.num_kv_heads,
                head_size=self.head_size,
                dtype=self.kv_cache_torch_dtype,
            )

    class StandInAttention(nn.Module):
        """Replaces LlamaAttention only. Same __init__/forward signatures (checked at run time
        against the installed LlamaAttention). Per-token mixing that depends on the position,
        so mis-attributed tokens or positions show up when the captured states are verified."""

        def __init__(self, config, hidden_size, num_heads, num_kv_heads,
                     max_position_embeddings=8192, quant_config=None, bias=False,
                     bias_o_proj=False, cache_config=None, prefix="",
                     attn_type=vllm_llama.AttentionType.DECODER):
            super().__init__()
            head_dim = getattr(config, "head_dim", None) or hidden_size // num_heads
            self.proj = nn.Linear(hidden_size, hidden_size, bias=False)
            self.attn = StandInKVLayer(num_kv_heads, head_dim, f"{prefix}.attn", cache_config,
                                       torch.get_default_dtype())

        def forward(self, positions, hidden_states):
            pos = positions.to(hidden_states.dtype).unsqueeze(-1)
            return torch.tanh(self.proj(hidden_states)) + 0.05 * torch.sin(0.37 * pos)

    # vLLM inspects a lazily registered architecture in a *subprocess* ("to avoid initializing
    # CUDA"), ~6 s here, unless ~/.cache/vllm/modelinfos already has it. There is no CUDA to
    # protect and the rehearsal spawns no processes: register the already-imported class, so
    # vLLM's own _ModelInfo.from_model_cls inspects it in-process.
    for arch, entry in list(vllm_registry.ModelRegistry.models.items()):
        if getattr(entry, "module_name", None) == vllm_llama.__name__ and hasattr(vllm_llama, entry.class_name):
            vllm_registry.ModelRegistry.models[arch] = vllm_registry._RegisteredModel.from_model_cls(
                getattr(vllm_llama, entry.class_name))

    layer_type = functools.partial(vllm_llama.LlamaDecoderLayer, attn_layer_type=StandInAttention)
    return types.SimpleNamespace(
        module=vllm_llama, StandInAttention=StandInAttention, layer_type=layer_type,
        model_kwargs={"layer_type": layer_type},
    )


def self_check(run, parts):
    llama = parts.module
    run.check("StandInAttention.__init__ vs LlamaAttention.__init__",
              sig(parts.StandInAttention.__init__) == sig(llama.LlamaAttention.__init__),
              f"{inspect.signature(llama.LlamaAttention.__init__)}")
    run.check("StandInAttention.forward vs LlamaAttention.forward",
              [p[:2] for p in sig(parts.StandInAttention.forward)] == [p[:2] for p in sig(llama.LlamaAttention.forward)],
              f"{inspect.signature(llama.LlamaAttention.forward)}")
    # The seams in the real model classes we build through.
    run.check("layer_type seam vs LlamaForCausalLM.__init__",
              "layer_type" in inspect.signature(llama.LlamaForCausalLM.__init__).parameters)
    run.check("attn_layer_type seam vs LlamaDecoderLayer.__init__",
              "attn_layer_type" in inspect.signature(llama.LlamaDecoderLayer.__init__).parameters)
    fwd = [p[:2] for p in sig(llama.LlamaDecoderLayer.forward)]
    run.check("decoder layer call vs LlamaDecoderLayer.forward",
              [n for n, _ in fwd] == ["self", "positions", "hidden_states", "residual"], str(fwd))


def reference_states(model, prompt, layers):
    """Expected captures for one prompt run alone: hidden+residual after each requested layer."""
    import torch

    base = model.model
    with torch.inference_mode():
        ids = torch.tensor(prompt, dtype=torch.long)
        pos = torch.arange(len(prompt), dtype=torch.long)
        h = base.embed_tokens(ids)
        res = None
        out = {}
        for i, layer in enumerate(base.layers):
            h, res = layer(positions=pos, hidden_states=h, residual=res)
            if i in layers:
                out[i] = (h + res).float()
    return out

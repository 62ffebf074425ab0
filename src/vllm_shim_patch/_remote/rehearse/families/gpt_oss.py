"""gpt-oss: vLLM's GptOssForCausalLM: sliding-window and full attention layers in turn (two KV
cache specs), attention sinks, biased experts with the clamped SwiGLU, through vLLM's CPU path."""

from typing import Any

from . import common

NAME = "gpt-oss"
ARCHITECTURES = ("GptOssForCausalLM",)
MODULES = ("vllm.model_executor.models.gpt_oss",)
# The first vLLM release whose model registry has each architecture (common.SURVEYED_FIRST).
FIRST_RELEASE = {"GptOssForCausalLM": common.SURVEYED_FIRST}
# --arch gpt-oss: gpt-oss-20b's published config.json (its MXFP4 quantization left out).
PRESET = {
    "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "hidden_size": 2880,
    "intermediate_size": 2880, "num_hidden_layers": 24, "num_attention_heads": 64, "num_key_value_heads": 8,
    "head_dim": 64, "num_local_experts": 32, "num_experts_per_tok": 4, "experts_per_token": 4,
    "sliding_window": 128, "layer_types": ["sliding_attention", "full_attention"] * 12,
    "rope_scaling": {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                     "truncate": False, "original_max_position_embeddings": 4096},
    "rope_theta": 150000, "max_position_embeddings": 131072, "vocab_size": 201088, "rms_norm_eps": 1e-5,
    "swiglu_limit": 7.0, "attention_bias": True, "tie_word_embeddings": False, "eos_token_id": 200002,
    "pad_token_id": 199999, "hidden_act": "silu", "initial_context_length": 4096, "torch_dtype": "bfloat16",
}
SUMMARY = "sliding-window and full layers in turn (two KV cache specs), attention sinks, biased experts"
PRESETS: dict[str, dict[str, Any]] = {}  # no --arch name besides NAME
WRAPPER = False  # its decoder stack is model.model
TOKENIZER_CLASS = None  # the tiny tokenizer's default class
REAL = [
    "vllm.model_executor.models.gpt_oss: GptOssForCausalLM, GptOssModel, TransformerBlock, OAIAttention "
    "(vLLM's Attention layer with sinks and per-layer sliding window), MLPBlock (vLLM's FusedMoE with biases)",
]
STOOD_IN: list[str] = []

# What protocols.Family leaves optional, at its defaults here.
files = common.no_files
special_tokens = common.no_special_tokens
self_check = common.no_self_check


def shrink(config, max_model_len, vocab=None):
    out = common.shrink(config, max_model_len, vocab=vocab)
    out.update({"num_local_experts": 8, "num_experts_per_tok": 2, "experts_per_token": 2,
                "intermediate_size": 32})
    return out

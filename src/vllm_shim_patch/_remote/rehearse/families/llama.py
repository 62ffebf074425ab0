"""Llama (and Mistral): vLLM's LlamaForCausalLM as its model code builds it; nothing of the
model stood in (attention runs through the stand-in attention backend)."""

from typing import Any

from . import common

NAME = "llama"
ARCHITECTURES = ("LlamaForCausalLM", "MistralForCausalLM")
MODULES = ("vllm.model_executor.models.llama",)
# The first vLLM release whose model registry has each architecture (common.SURVEYED_FIRST).
FIRST_RELEASE = {"LlamaForCausalLM": common.SURVEYED_FIRST, "MistralForCausalLM": common.SURVEYED_FIRST}
# --arch llama: Llama-3.1-8B's published config.json.
PRESET = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
    "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
    "num_key_value_heads": 8, "head_dim": 128, "hidden_act": "silu", "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
    "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "vocab_size": 128256, "bos_token_id": 128000, "eos_token_id": 128001, "tie_word_embeddings": False,
    "attention_bias": False, "mlp_bias": False, "torch_dtype": "bfloat16",
}
SUMMARY = "Llama-3.1-8B's config: GQA, llama3 rope scaling"
PRESETS: dict[str, dict[str, Any]] = {}  # no --arch name besides NAME
WRAPPER = False  # its decoder stack is model.model
TOKENIZER_CLASS = None  # the tiny tokenizer's default class
REAL = [
    "vllm.model_executor.models.llama: LlamaForCausalLM, LlamaModel, LlamaDecoderLayer, LlamaAttention (with "
    "vLLM's Attention layer), LlamaMLP, built by vLLM's model registry under set_current_vllm_config",
]
STOOD_IN: list[str] = []

# What protocols.Family leaves optional, at its defaults here.
files = common.no_files
special_tokens = common.no_special_tokens
self_check = common.no_self_check


def shrink(config, max_model_len, vocab=None):
    return common.shrink(config, max_model_len, vocab=vocab)

"""Qwen2 and Qwen3 (dense): vLLM's Qwen2ForCausalLM / Qwen3ForCausalLM as their model code
builds them (Qwen3's per-head q/k norms included)."""

from typing import Any

from . import common

NAME = "qwen"
ARCHITECTURES = ("Qwen2ForCausalLM", "Qwen3ForCausalLM")
MODULES = ("vllm.model_executor.models.qwen2", "vllm.model_executor.models.qwen3")
# The first vLLM release whose model registry has each architecture (common.SURVEYED_FIRST).
FIRST_RELEASE = {"Qwen2ForCausalLM": common.SURVEYED_FIRST, "Qwen3ForCausalLM": common.SURVEYED_FIRST}
# --arch qwen: Qwen3-8B's published config.json.
PRESET = {
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 4096,
    "intermediate_size": 12288, "num_hidden_layers": 36, "num_attention_heads": 32,
    "num_key_value_heads": 8, "head_dim": 128, "hidden_act": "silu", "max_position_embeddings": 40960,
    "rms_norm_eps": 1e-6, "rope_theta": 1000000, "rope_scaling": None, "attention_bias": False,
    "use_sliding_window": False, "sliding_window": None, "max_window_layers": 36,
    "vocab_size": 151936, "bos_token_id": 151643, "eos_token_id": 151645, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}
SUMMARY = "Qwen3-8B's config: per-head q/k norms"
PRESETS: dict[str, dict[str, Any]] = {}  # no --arch name besides NAME
WRAPPER = False  # its decoder stack is model.model
TOKENIZER_CLASS = None  # the tiny tokenizer's default class
REAL = [
    "vllm.model_executor.models.qwen2 / qwen3: Qwen2ForCausalLM, Qwen3ForCausalLM, their models, decoder layers, "
    "attention (with vLLM's Attention layer) and MLPs, built by vLLM's model registry",
]
STOOD_IN: list[str] = []

# What protocols.Family leaves optional, at its defaults here.
files = common.no_files
special_tokens = common.no_special_tokens
self_check = common.no_self_check


def shrink(config, max_model_len, vocab=None):
    out = common.shrink(config, max_model_len, vocab=vocab)
    if "max_window_layers" in out:
        out["max_window_layers"] = out["num_hidden_layers"]
    return out

"""Qwen3-MoE: vLLM's Qwen3MoeForCausalLM, its sparse layers' real FusedMoE (softmax top-k routing)
through vLLM's own CPU expert path."""

from typing import Any

from . import common

NAME = "qwen3-moe"
ARCHITECTURES = ("Qwen3MoeForCausalLM", "Qwen2MoeForCausalLM")
MODULES = ("vllm.model_executor.models.qwen3_moe", "vllm.model_executor.models.qwen2_moe")
# The first vLLM release whose model registry has each architecture (common.SURVEYED_FIRST).
FIRST_RELEASE = {"Qwen3MoeForCausalLM": common.SURVEYED_FIRST, "Qwen2MoeForCausalLM": common.SURVEYED_FIRST}
# --arch qwen3-moe: Qwen3-30B-A3B's published config.json.
PRESET = {
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 2048,
    "intermediate_size": 6144, "moe_intermediate_size": 768, "num_hidden_layers": 48,
    "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "num_experts": 128,
    "num_experts_per_tok": 8, "decoder_sparse_step": 1, "mlp_only_layers": [], "norm_topk_prob": True,
    "max_position_embeddings": 40960, "rope_theta": 1000000.0, "rope_scaling": None, "rms_norm_eps": 1e-6,
    "vocab_size": 151936, "tie_word_embeddings": False, "bos_token_id": 151643, "eos_token_id": 151645,
    "sliding_window": None, "use_sliding_window": False, "max_window_layers": 48, "attention_bias": False,
    "hidden_act": "silu", "torch_dtype": "bfloat16",
}
SUMMARY = "Qwen3-30B-A3B's config: softmax top-k experts"
PRESETS: dict[str, dict[str, Any]] = {}  # no --arch name besides NAME
WRAPPER = False  # its decoder stack is model.model
TOKENIZER_CLASS = None  # the tiny tokenizer's default class
REAL = [
    "vllm.model_executor.models.qwen3_moe: Qwen3MoeForCausalLM, Qwen3MoeModel, its decoder layers, attention "
    "(vLLM's Attention layer) and sparse MoE blocks (vLLM's FusedMoE and router gate)",
]
STOOD_IN: list[str] = []

# What protocols.Family leaves optional, at its defaults here.
files = common.no_files
special_tokens = common.no_special_tokens
self_check = common.no_self_check


def shrink(config, max_model_len, vocab=None):
    out = common.shrink(config, max_model_len, vocab=vocab)
    out.update({"num_experts": 8, "moe_intermediate_size": 32,
                "num_experts_per_tok": min(int(config.get("num_experts_per_tok") or 2), 2)})
    if "shared_expert_intermediate_size" in config:
        out["shared_expert_intermediate_size"] = 32
    if isinstance(config.get("mlp_only_layers"), list):
        out["mlp_only_layers"] = [i for i in config["mlp_only_layers"] if i < out["num_hidden_layers"]]
    if "max_window_layers" in out:
        out["max_window_layers"] = out["num_hidden_layers"]
    return out

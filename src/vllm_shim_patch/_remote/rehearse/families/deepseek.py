"""DeepSeek-V3 (and Kimi-K2, Mistral-Large-3: the same class): vLLM's DeepseekV3ForCausalLM with
multi-head latent attention and mixture-of-experts, the dense first layers kept."""

from . import common

NAME = "deepseek"
ARCHITECTURES = ("DeepseekV3ForCausalLM", "DeepseekV2ForCausalLM", "MistralLarge3ForCausalLM")
MODULES = ("vllm.model_executor.models.deepseek_v2",)
# The first vLLM release whose model registry has each architecture (common.SURVEYED_FIRST).
FIRST_RELEASE = {
    "DeepseekV3ForCausalLM": common.SURVEYED_FIRST,
    "DeepseekV2ForCausalLM": common.SURVEYED_FIRST,
    "MistralLarge3ForCausalLM": "0.12.0",
}
# --arch deepseek: DeepSeek-V3's published config.json (its fp8 quantization left out).
PRESET = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "vocab_size": 129280,
    "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 61,
    "num_attention_heads": 128, "num_key_value_heads": 128, "n_shared_experts": 1, "n_routed_experts": 256,
    "routed_scaling_factor": 2.5, "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64,
    "v_head_dim": 128, "qk_nope_head_dim": 128, "topk_method": "noaux_tc", "n_group": 8, "topk_group": 4,
    "num_experts_per_tok": 8, "moe_layer_freq": 1, "first_k_dense_replace": 3, "norm_topk_prob": True,
    "scoring_func": "sigmoid", "hidden_act": "silu", "max_position_embeddings": 163840, "rms_norm_eps": 1e-6,
    "rope_theta": 10000, "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0,
                                          "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096,
                                          "type": "yarn"},
    "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 0, "eos_token_id": 1,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16",
}
# --arch mistral-large-3: DeepSeek-V3's architecture with Llama-4 attention scaling (q scaled from
# position 8192 on), as Mistral-Large-3 ships it.
PRESETS = {"mistral-large-3": {**PRESET, "llama_4_scaling": {"original_max_position_embeddings": 8192, "beta": 0.1}}}
SUMMARY = (
    "DeepSeek-V3's config (Kimi-K2's architecture too): multi-head latent attention, shared "
    "and routed experts with grouped sigmoid routing, dense first layers, yarn; "
    "`mistral-large-3`: the same with `llama_4_scaling`"
)
WRAPPER = False  # its decoder stack is model.model
TOKENIZER_CLASS = None  # the tiny tokenizer's default class
REAL = [
    "vllm.model_executor.models.deepseek_v2: DeepseekV3ForCausalLM, DeepseekV2Model, DeepseekV2DecoderLayer, "
    "DeepseekV2MLAAttention (vLLM's MultiHeadLatentAttentionWrapper and MLAAttention layer, its kv_b_proj), "
    "DeepseekV2MoE (vLLM's SharedFusedMoE, gate and shared experts), DeepseekV2MLP, llama_4_scaling where "
    "the config has it",
]
STOOD_IN = [
    "MLAAttention.forward_impl: MLA's prefill arithmetic in torch over a per-request latent KV history, keys "
    "and values expanded by the layer's own kv_b_proj (the FlashMLA / Triton MLA kernels need a GPU; the "
    "64-token KV block Hopper forces is not rehearsed)",
]

# What protocols.Family leaves optional, at its defaults here.
files = common.no_files
special_tokens = common.no_special_tokens
self_check = common.no_self_check


def shrink(config, max_model_len, vocab=None):
    out = common.shrink(config, max_model_len, vocab=vocab)
    # MLA: a latent and a rope part per head, v its own size; the query low-rank only where it has one.
    out.update({"kv_lora_rank": 32, "qk_rope_head_dim": 8, "qk_nope_head_dim": 16, "v_head_dim": 16})
    out.pop("head_dim", None)
    if config.get("q_lora_rank") is not None:
        out["q_lora_rank"] = 32
    out["num_key_value_heads"] = out["num_attention_heads"]
    experts = config.get("n_routed_experts")
    if experts:
        groups = int(config.get("n_group") or 1)
        out["n_group"] = min(groups, 4)
        out["topk_group"] = min(int(config.get("topk_group") or 1), out["n_group"])
        out["n_routed_experts"] = 2 * out["n_group"] if out["n_group"] > 1 else 8
        out["num_experts_per_tok"] = min(int(config.get("num_experts_per_tok") or 2), 2 * out["topk_group"], 4)
        out["moe_intermediate_size"] = 32
        # The dense first layers stay, at least one, so a model of 4 layers has both kinds.
        out["first_k_dense_replace"] = min(int(config.get("first_k_dense_replace") or 0), 1)
    scaling = config.get("llama_4_scaling")
    if isinstance(scaling, dict) and scaling.get("original_max_position_embeddings"):
        # The scaling starts at this position: bring it inside the workload's prompts.
        out["llama_4_scaling"] = {**scaling, "original_max_position_embeddings":
                                  min(int(scaling["original_max_position_embeddings"]), max_model_len // 4)}
    return out

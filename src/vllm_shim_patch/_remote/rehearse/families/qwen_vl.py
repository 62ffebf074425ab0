"""Qwen3-VL: vLLM's Qwen3VLForConditionalGeneration, a multimodal wrapper (vision tower with
deepstack) around a Qwen3 language model that always passes `deepstack_input_embeds` to its
text model. speculators captures from the language model, reached through get_language_model()."""

from typing import Any

import copy
import json

from . import common

NAME = "qwen3-vl"
ARCHITECTURES = ("Qwen3VLForConditionalGeneration",)
MODULES = ("vllm.model_executor.models.qwen3_vl", "vllm.model_executor.models.qwen3")
# The first vLLM release whose model registry has each architecture (common.SURVEYED_FIRST).
FIRST_RELEASE = {"Qwen3VLForConditionalGeneration": "0.11.0"}
# --arch qwen3-vl: Qwen3-VL-8B-Instruct's published config.json.
PRESET = {
    "architectures": ["Qwen3VLForConditionalGeneration"], "model_type": "qwen3_vl",
    "image_token_id": 151655, "video_token_id": 151656, "vision_start_token_id": 151652,
    "vision_end_token_id": 151653, "tie_word_embeddings": False,
    "text_config": {
        "model_type": "qwen3_vl_text", "hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 36,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "rope_theta": 5000000,
        "max_position_embeddings": 262144, "rms_norm_eps": 1e-6, "vocab_size": 151936, "hidden_act": "silu",
        "rope_scaling": {"rope_type": "default", "mrope_section": [24, 20, 20], "mrope_interleaved": True},
        "attention_bias": False, "tie_word_embeddings": False, "bos_token_id": 151643, "eos_token_id": 151645,
    },
    "vision_config": {
        "model_type": "qwen3_vl", "depth": 27, "hidden_size": 1152, "intermediate_size": 4304, "num_heads": 16,
        "in_channels": 3, "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2,
        "out_hidden_size": 4096, "num_position_embeddings": 2304, "deepstack_visual_indexes": [8, 16, 24],
        "hidden_act": "gelu_pytorch_tanh",
    },
}
WRAPPER = True  # speculators captures from get_language_model()
SUMMARY = "the wrapper whose text model takes `deepstack_input_embeds`; MRoPE"
PRESETS: dict[str, dict[str, Any]] = {}  # no --arch name besides NAME
REAL = [
    "vllm.model_executor.models.qwen3_vl: Qwen3VLForConditionalGeneration (vision tower and deepstack mergers "
    "built, not run: the prompts are text), Qwen3LLMForCausalLM / Qwen3LLMModel (its forward passes "
    "deepstack_input_embeds), Qwen3 decoder layers with vLLM's Attention layer; transformers' Qwen3VLProcessor",
]
STOOD_IN = [
    "positions: one row per token (the runner computes MRoPE's three rows; for text-only prompts they are equal, "
    "and MRoPE of equal rows is the 1-D rotary embedding)",
    "preprocessor_config.json / video_preprocessor_config.json (where the folder lacks them): transformers' own "
    "Qwen2VL image and Qwen3VL video processors, sized small (vLLM sizes its encoder cache from a dummy image)",
]
TOKENIZER_CLASS = "Qwen2TokenizerFast"  # Qwen3VLProcessor accepts no other
_SPECIAL = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")

# What protocols.Family leaves optional, at its defaults here.
self_check = common.no_self_check


def shrink(config, max_model_len, vocab=None):
    out = copy.deepcopy(config)
    text_config = common.shrink(config["text_config"], max_model_len, vocab=vocab)
    rope = dict(text_config.get("rope_scaling") or {})
    if "mrope_section" in rope:
        rope["mrope_section"] = [4, 2, 2]  # halves of the tiny head size: 8 = 16 / 2
    text_config["rope_scaling"] = rope
    out["text_config"] = text_config
    vision = dict(config.get("vision_config") or {})
    vision.update({"depth": 2, "hidden_size": common.HIDDEN, "intermediate_size": common.INTERMEDIATE,
                   "num_heads": common.HEADS, "out_hidden_size": text_config["hidden_size"],
                   "num_position_embeddings": 64, "deepstack_visual_indexes": [0]})
    out["vision_config"] = vision
    if vocab is not None:
        for i, key in enumerate(("vision_start_token_id", "vision_end_token_id", "image_token_id", "video_token_id")):
            out[key] = vocab - 4 + i
    out["torch_dtype"] = "float32"
    return out


def special_tokens(config):
    keys = ("vision_start_token_id", "vision_end_token_id", "image_token_id", "video_token_id")
    return {t: config[k] for t, k in zip(_SPECIAL, keys)}


def files(config):
    image = {"image_processor_type": "Qwen2VLImageProcessorFast", "patch_size": 16, "temporal_patch_size": 2,
             "merge_size": 2, "size": {"shortest_edge": 64 * 64, "longest_edge": 128 * 128},
             "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5], "processor_class": "Qwen3VLProcessor"}
    video = {"video_processor_type": "Qwen3VLVideoProcessor", "patch_size": 16, "temporal_patch_size": 2,
             "merge_size": 2, "size": {"shortest_edge": 64 * 64, "longest_edge": 128 * 128}, "fps": 2,
             "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5], "processor_class": "Qwen3VLProcessor"}
    return {"preprocessor_config.json": json.dumps(image), "video_preprocessor_config.json": json.dumps(video)}

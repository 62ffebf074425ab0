"""Kimi-K2.5: vLLM's KimiK25ForConditionalGeneration, a multimodal wrapper (MoonViT vision tower,
projector) around a DeepSeek-V3 language model with MLA and mixture-of-experts. speculators
captures from the language model, reached through get_language_model()."""

from typing import Any

import copy
import json

from . import common, deepseek

NAME = "kimi-k2.5"
ARCHITECTURES = ("KimiK25ForConditionalGeneration",)
MODULES = ("vllm.model_executor.models.kimi_k25", "vllm.model_executor.models.deepseek_v2")
# The first vLLM release whose model registry has each architecture (common.SURVEYED_FIRST).
FIRST_RELEASE = {"KimiK25ForConditionalGeneration": "0.15.0"}
# --arch kimi-k2.5: the published Kimi-K2.5 config.json's values (its int4 quantization left out).
PRESET = {
    "architectures": ["KimiK25ForConditionalGeneration"], "model_type": "kimi_k25",
    "auto_map": {"AutoConfig": "configuration_kimi_k25.KimiK25Config"},
    "media_placeholder_token_id": 163605, "pad_token_id": 163839, "ignore_index": -100,
    "text_config": {
        **deepseek.PRESET, "vocab_size": 163840, "num_attention_heads": 64, "num_key_value_heads": 64,
        "n_routed_experts": 384, "routed_scaling_factor": 2.827, "n_group": 1, "topk_group": 1,
        "first_k_dense_replace": 1, "max_position_embeddings": 262144, "rope_theta": 50000.0,
        "rope_scaling": {"beta_fast": 1.0, "beta_slow": 1.0, "factor": 64.0, "mscale": 1.0, "mscale_all_dim": 1.0,
                         "original_max_position_embeddings": 4096, "type": "yarn"},
        "bos_token_id": 163584, "eos_token_id": 163585,
    },
    "vision_config": {
        "patch_size": 14, "init_pos_emb_height": 64, "init_pos_emb_width": 64, "init_pos_emb_time": 4,
        "pos_emb_type": "divided_fixed", "num_attention_heads": 16, "num_hidden_layers": 27, "hidden_size": 1152,
        "intermediate_size": 4304, "merge_kernel_size": [2, 2], "video_attn_type": "spatial_temporal",
        "merge_type": "sd2_tpool", "mm_projector_type": "patchmerger", "mm_hidden_size": 1152,
        "projector_hidden_act": "gelu", "projector_ln_eps": 1e-5,
    },
}
WRAPPER = True  # speculators captures from get_language_model()
SUMMARY = "the multimodal wrapper (MoonViT tower built, not run) around Kimi-K2's DeepSeek-V3"
PRESETS: dict[str, dict[str, Any]] = {}  # no --arch name besides NAME
TOKENIZER_CLASS = None  # the tiny tokenizer's default class
REAL = [
    "vllm.model_executor.models.kimi_k25: KimiK25ForConditionalGeneration (vLLM's MoonViT vision tower and "
    "projector built, not run: the prompts are text), its DeepSeek-V3 language model as in the deepseek family",
    *deepseek.REAL,
]
STOOD_IN = [
    *deepseek.STOOD_IN,
    "configuration_kimi_k25.py and kimi_k25_vision_processing.py (without --model): the checkpoint's remote code, "
    "stood in by a file that re-exports the config class vLLM's config registry names for kimi_k25 and an image "
    "processor with the interface "
    "vLLM's KimiK25ProcessingInfo reads (it processes no images: the prompts are text); with --model the "
    "folder's own files are used",
]
CONFIG_STAND_IN = (
    '"""Stand-in for the checkpoint\'s configuration_kimi_k25.py (the rehearsal has no checkpoint):\n'
    'the class vLLM\'s config registry names for model_type kimi_k25, which vLLM\'s model asks the config\n'
    'to be (vLLM\'s own KimiK25Config up to 0.31, transformers\' Kimi_K25Config from 0.32)."""\n'
    "from vllm.transformers_utils.config import _CONFIG_REGISTRY\n"
    "\n"
    'KimiK25Config = _CONFIG_REGISTRY["kimi_k25"]\n'
)


PROCESSOR_STAND_IN = '''"""Stand-in for the checkpoint's kimi_k25_vision_processing.py (the rehearsal has no checkpoint):
the interface vLLM's KimiK25ProcessingInfo and MoonshotKimiVAutoProcessor use, every image one
merged patch. vLLM sizes its encoder cache from a dummy item at start-up; the prompts hold no media."""
import torch
from transformers.image_processing_utils import BaseImageProcessor


class KimiK25VisionProcessor(BaseImageProcessor):
    model_input_names = ["pixel_values", "grid_thws"]
    num_frames_per_chunk = 4
    patch_size = 14
    merge = 2

    def _grid(self, chunk):
        frames = len(chunk["video_chunk"]) if chunk.get("type") == "video_chunk" else 1
        return (frames, self.merge, self.merge)

    def media_tokens_calculator(self, chunk):
        _frames, h, w = self._grid(chunk)  # frames are pooled: one token per merged patch
        return (h // self.merge) * (w // self.merge)

    def preprocess(self, chunks, **kwargs):
        grids = [self._grid(c) for c in chunks]
        n = sum(t * h * w for t, h, w in grids)
        return {"pixel_values": torch.zeros(n, 3, self.patch_size, self.patch_size),
                "grid_thws": torch.tensor(grids)}
'''
# With media_proc_cfg, the published preprocessor_config.json's section (its limits shrunk): vLLM
# 0.32+ builds its own KimiK25FusedVisionProcessor from it where numba is installed.
PREPROCESSOR = json.dumps({
    "auto_map": {"AutoImageProcessor": "kimi_k25_vision_processing.KimiK25VisionProcessor"},
    "image_processor_type": "KimiK25VisionProcessor",
    "media_proc_cfg": {"patch_size": 14, "merge_kernel_size": 2, "temporal_merge_kernel_size": 4,
                       "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5], "in_patch_limit": 64,
                       "patch_limit_on_one_side": 16, "fixed_output_tokens": None, "in_patch_limit_each_frame": 64,
                       "in_patch_limit_video": None},
})

# What protocols.Family leaves optional, at its defaults here.
self_check = common.no_self_check


def shrink(config, max_model_len, vocab=None):
    out = copy.deepcopy(config)
    out["text_config"] = deepseek.shrink(config["text_config"], max_model_len, vocab=vocab)
    if out.get("media_placeholder_token_id", 0) >= out["text_config"]["vocab_size"]:
        out["media_placeholder_token_id"] = out["text_config"]["vocab_size"] - 1
    vision = dict(config.get("vision_config") or {})
    vision.update({"hidden_size": common.HIDDEN, "num_attention_heads": common.HEADS, "num_hidden_layers": 1,
                   "intermediate_size": common.INTERMEDIATE, "mm_hidden_size": common.HIDDEN})
    out["vision_config"] = vision
    out["torch_dtype"] = "float32"
    out.pop("quantization_config", None)
    out["text_config"].pop("quantization_config", None)
    return out


def special_tokens(config):
    """Tokens the tokenizer must know by id: vLLM's processor finds the media placeholder by it."""
    return {"<|media_pad|>": config["media_placeholder_token_id"]}


def files(config):
    """The files the tiny folder needs besides config.json and a tokenizer, without --model."""
    return {"configuration_kimi_k25.py": CONFIG_STAND_IN, "kimi_k25_vision_processing.py": PROCESSOR_STAND_IN,
            "preprocessor_config.json": PREPROCESSOR}

"""The model families the rehearsal can build: one module each, selected by architecture.

A family module defines NAME, ARCHITECTURES, MODULES (vLLM's model modules, registered
in-process), PRESET (a published full-size config.json: `--arch NAME`), REAL and STOOD_IN
(reported verbatim) and `shrink(config, max_model_len, vocab)` (the tiny config of the same
architecture); `self_check(run, model)` where it has stand-ins of its own; a multimodal wrapper
sets WRAPPER (its language model's config is `text_config`, its decoder stack under
get_language_model()) and may give `files(config)` and `special_tokens(config)` for what its
processor needs. Adding a family: one module,
one entry here, and its architectures in the tool's analysis/rehearse.py FAMILIES.
"""

from . import deepseek, gpt_oss, kimi, llama, qwen, qwen_moe, qwen_vl

FAMILIES = {f.NAME: f for f in (llama, qwen, qwen_moe, deepseek, kimi, gpt_oss, qwen_vl)}
DEFAULT = llama.NAME


def supported():
    return sorted(a for f in FAMILIES.values() for a in f.ARCHITECTURES)


def text(family, config):
    """The language model's config (a multimodal wrapper keeps it under text_config)."""
    return config["text_config"] if getattr(family, "WRAPPER", False) else config


def base_model(family, model):
    """The decoder stack speculators captures from: a wrapper's language model's (reached through
    get_language_model(), as speculators' patched worker does), else the model's own."""
    return model.get_language_model().model if getattr(family, "WRAPPER", False) else model.model


def self_check(family, run, model):
    """The family's own stand-ins against vLLM's classes (most families have none)."""
    check = getattr(family, "self_check", None)
    if check is not None:
        check(run, model)


def presets():
    """`--arch` names: each family's name (its PRESET) and its extra PRESETS."""
    return sorted([*FAMILIES, *(n for f in FAMILIES.values() for n in getattr(f, "PRESETS", {}))])


def preset(name):
    """(family, config) of an `--arch` name, or None."""
    if name in FAMILIES:
        return FAMILIES[name], FAMILIES[name].PRESET
    for family in FAMILIES.values():
        if name in getattr(family, "PRESETS", {}):
            return family, family.PRESETS[name]
    return None


def for_architecture(arch):
    for family in FAMILIES.values():
        if arch in family.ARCHITECTURES:
            return family
    return None

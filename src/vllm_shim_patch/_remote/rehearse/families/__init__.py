"""The model families the rehearsal can build: one module each, selected by architecture.

A family module is a `protocols.Family`: NAME, ARCHITECTURES, MODULES (vLLM's model modules,
registered in-process besides the one vLLM's registry names), FIRST_RELEASE (the first vLLM
release whose registry has each architecture: the words of "no model class"), PRESET (a published full-size config.json: `--arch NAME`) and PRESETS
(more `--arch` names), SUMMARY (the README's line), REAL and STOOD_IN (reported verbatim),
`shrink(config, max_model_len, vocab)` (the tiny config of the same architecture), WRAPPER (a
multimodal wrapper: its language model's config is `text_config`, its decoder stack under
get_language_model()), `files(config)`, `special_tokens(config)` and TOKENIZER_CLASS (what its
processor needs), `self_check(run, model)` (its own stand-ins); the optional ones at the
defaults of `common` where it needs none.

FAMILIES is the one table: the tool reads it too (`analysis/rehearse.py`, which loads this
package by path: every family module is standard library only at module level), and so do the
README's family table and the `--arch`/`--model` messages. Adding a family: one module, one entry
in FAMILIES, the two generated pages it shows in (ARCHITECTURE.md, "Where a change goes").
"""

from . import deepseek, gpt_oss, kimi, llama, qwen, qwen_moe, qwen_vl

FAMILIES = {f.NAME: f for f in (llama, qwen, qwen_moe, deepseek, kimi, gpt_oss, qwen_vl)}
DEFAULT = llama.NAME


def supported():
    return sorted(a for f in FAMILIES.values() for a in f.ARCHITECTURES)


def text(family, config):
    """The language model's config (a multimodal wrapper keeps it under text_config)."""
    return config["text_config"] if family.WRAPPER else config


def base_model(family, model):
    """The decoder stack speculators captures from: a wrapper's language model's (reached through
    get_language_model(), as speculators' patched worker does), else the model's own."""
    if not family.WRAPPER:
        return model.model
    language_model = model.get_language_model()
    # vLLM 0.15's Kimi-K2.5: the language model is the decoder stack (DeepseekV2Model) itself.
    return language_model if hasattr(language_model, "layers") else language_model.model


def first_release(family, arch):
    """The first vLLM release whose model registry has `arch` (for the words only: whether this
    vLLM has it is asked of its registry)."""
    return family.FIRST_RELEASE.get(arch, "unknown")


def presets():
    """`--arch` names: each family's name (its PRESET) and its extra PRESETS."""
    return sorted([*FAMILIES, *(n for f in FAMILIES.values() for n in f.PRESETS)])


def preset(name):
    """(family, config) of an `--arch` name, or None."""
    if name in FAMILIES:
        return FAMILIES[name], FAMILIES[name].PRESET
    for family in FAMILIES.values():
        if name in family.PRESETS:
            return family, family.PRESETS[name]
    return None


def for_architecture(arch):
    for family in FAMILIES.values():
        if arch in family.ARCHITECTURES:
            return family
    return None

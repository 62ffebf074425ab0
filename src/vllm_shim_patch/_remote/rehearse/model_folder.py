"""The tiny model folder (stand-in for a real checkpoint): the family's config.json and a
word-level tokenizer, no weights (vLLM's dummy initializer makes them)."""

import json
import os

STOOD_IN = ("model folder: a temp dir with a {description} config.json and a word-level tokenizer.json, "
            "no weights (weights come from vLLM's own dummy initializer)")


def tokenizer(vocab_size, model_max_length):
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for i in range(3, vocab_size):
        vocab[f"w{i}"] = i
    tok = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": True}
            for t, i in (("<unk>", 0), ("<s>", 1), ("</s>", 2))
        ],
        "normalizer": None,
        "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": None,
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"},
    }
    cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "model_max_length": model_max_length,
    }
    return tok, cfg


def write(path, config):
    tok, tok_cfg = tokenizer(config["vocab_size"], config["max_position_embeddings"])
    for name, obj in (("config.json", config), ("tokenizer.json", tok), ("tokenizer_config.json", tok_cfg)):
        with open(os.path.join(path, name), "w") as f:
            json.dump(obj, f)

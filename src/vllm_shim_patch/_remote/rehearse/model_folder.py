"""The tiny model folder (stand-in for a real checkpoint): the shrunk config.json and the user's
own tokenizer and remote-code files where a folder was given (a word-level tokenizer otherwise),
no weights (vLLM's dummy initializer makes them)."""

import json
import os
import shutil

STOOD_IN = ("model folder: a temp dir with a {description} config.json and {tokenizer}, no weights "
            "(weights come from vLLM's own dummy initializer)")
WORD_LEVEL = "a word-level tokenizer.json"
# What a checkpoint folder holds besides its tokenizer, code and configs: never copied.
WEIGHTS = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".ckpt", ".h5", ".msgpack", ".onnx")


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


def has_tokenizer(folder):
    names = set(os.listdir(folder))
    return bool(names & {"tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json",
                         "tiktoken.model"})


def copy_folder(source, path):
    """The user's folder as it is (tokenizer, remote code, preprocessor configs), weights left out."""
    for name in sorted(os.listdir(source)):
        src = os.path.join(source, name)
        if not os.path.isfile(src) or name.endswith(WEIGHTS) or name.endswith(".index.json"):
            continue
        shutil.copyfile(src, os.path.join(path, name))


def write(path, config, source=None):
    """Write the folder; the words for STOOD_IN's {tokenizer}."""
    if source is not None:
        copy_folder(source, path)
    words = "the folder's own tokenizer, code and configs"
    if source is None or not has_tokenizer(source):
        tok, tok_cfg = tokenizer(config["vocab_size"], config["max_position_embeddings"])
        for name, obj in (("tokenizer.json", tok), ("tokenizer_config.json", tok_cfg)):
            with open(os.path.join(path, name), "w") as f:
                json.dump(obj, f)
        words = WORD_LEVEL
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f)
    return words

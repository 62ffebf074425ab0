"""The tiny model folder (stand-in for a real checkpoint): the shrunk config.json and the user's
own tokenizer and remote-code files where a folder was given (a word-level tokenizer otherwise),
no weights (vLLM's dummy initializer makes them)."""

import json
import os
import shutil

STOOD_IN = ("model folder: a temp dir with a {description} config.json and {tokenizer}, no weights "
            "(weights come from vLLM's own dummy initializer)")
WORD_LEVEL = "a word-level tokenizer.json"
# What the rehearsal reads of a checkpoint folder besides config.json, by name: its tokenizer,
# its processor's and generation configs, its chat template; and its remote code (`*.py`, the
# modules an `auto_map` names and theirs). Nothing else is copied: not the weights, nor whatever
# else a folder holds (a 1 GB `rust_model.ot` would be copied whole into $TMPDIR).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "tiktoken.model", "vocab.json",
                   "vocab.txt", "merges.txt", "special_tokens_map.json", "added_tokens.json", "spiece.model",
                   "sentencepiece.bpe.model", "qwen.tiktoken")
CONFIG_FILES = ("generation_config.json", "preprocessor_config.json", "video_preprocessor_config.json",
                "processor_config.json", "chat_template.json", "chat_template.jinja")


def tokenizer(vocab_size, model_max_length, specials=None, tokenizer_class="PreTrainedTokenizerFast"):
    """specials: more special tokens by id (a model's processor looks its placeholders up by id);
    tokenizer_class: the fast class a model's processor insists on."""
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    by_id = {i: t for t, i in (specials or {}).items()}
    for i in range(3, vocab_size):
        vocab[by_id.get(i, f"w{i}")] = i
    tok = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": True}
            for t, i in (("<unk>", 0), ("<s>", 1), ("</s>", 2), *sorted((specials or {}).items()))
        ],
        "normalizer": None,
        "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": None,
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"},
    }
    cfg = {
        "tokenizer_class": tokenizer_class,
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


def needed(name):
    """Whether the rehearsal reads the folder's file `name` (`TOKENIZER_FILES`, `CONFIG_FILES`, code)."""
    return name in TOKENIZER_FILES or name in CONFIG_FILES or name.endswith(".py")


def copy_folder(source, path):
    """The files of the user's folder the rehearsal reads (`needed`), regular files only (a link is
    followed: a Hugging Face snapshot links to its blobs)."""
    for name in sorted(os.listdir(source)):
        src = os.path.join(source, name)
        if needed(name) and os.path.isfile(src):
            shutil.copyfile(src, os.path.join(path, name))


def stand_ins(source, extra):
    """The names of `extra` written as stand-ins: those the user's folder (if any) lacks."""
    return sorted(n for n in extra or {} if source is None or not os.path.exists(os.path.join(source, n)))


def write(path, config, source=None, extra=None, text=None, specials=None, tokenizer_class=None):
    """Write the folder (`extra`: more files by name; `text`: the language model's config where
    `config` wraps it); the words for STOOD_IN's {tokenizer}."""
    if source is not None:
        copy_folder(source, path)
    for name, content in (extra or {}).items():
        if os.path.exists(os.path.join(path, name)):
            continue  # the folder's own file, not a stand-in
        with open(os.path.join(path, name), "w") as f:
            f.write(content)
    words = "the folder's own tokenizer, code and configs"
    if source is None or not has_tokenizer(source):
        text = config if text is None else text
        tok, tok_cfg = tokenizer(text["vocab_size"], text["max_position_embeddings"], specials,
                                 tokenizer_class or "PreTrainedTokenizerFast")
        for name, obj in (("tokenizer.json", tok), ("tokenizer_config.json", tok_cfg)):
            with open(os.path.join(path, name), "w") as f:
                json.dump(obj, f)
        words = WORD_LEVEL
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f)
    return words

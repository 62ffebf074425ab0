"""`--model`'s config.json as the tool reads it before anything is written: bounded (a regular
file of at most `MAX_CONFIG` bytes: no FIFO to wait on, no device or folder to read whole), and
the sizes the rehearsal builds from checked (a whole number in a range the tiny model and its
stand-in tokenizer can be made of), so a config the rehearsal cannot use is one line naming the
file and the field, exit 2, never a MemoryError, a KeyError blamed on vLLM, or a patch written
first. The target reads the same file again (`_remote/rehearse/model.py`, bounded too).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..fsutil import read_regular

# Far above any published config.json (tens of kB), far below what would hurt to read.
MAX_CONFIG = 4 << 20
# The checkpoint's weight index (a tensor name per line of JSON): ~9 MB for DeepSeek-V3's.
MAX_INDEX = 64 << 20
# The rehearsal's prompts draw token ids from 3 (after <unk>, <s>, </s>) to the vocabulary's end;
# its stand-in tokenizer holds one entry per id, the tiny model an embedding row per id.
FIRST_TOKEN = 3
# field: (least, most). Published models stay far inside (vocabularies to ~262k, contexts to 10M).
SIZES: dict[str, tuple[int, int]] = {
    "vocab_size": (FIRST_TOKEN + 1, 1 << 20),
    "max_position_embeddings": (1, 1 << 24),
    "num_hidden_layers": (1, 1 << 16),
    "num_attention_heads": (1, 1 << 16),
    "num_key_value_heads": (1, 1 << 16),
    "hidden_size": (1, 1 << 20),
    "intermediate_size": (1, 1 << 22),
    "moe_intermediate_size": (1, 1 << 22),
    "head_dim": (1, 1 << 16),
    "n_routed_experts": (0, 1 << 16),
    "num_experts": (0, 1 << 16),
    "num_local_experts": (0, 1 << 16),
    "num_experts_per_tok": (1, 1 << 16),
    "n_shared_experts": (0, 1 << 16),
    "n_group": (1, 1 << 16),
    "topk_group": (1, 1 << 16),
    "first_k_dense_replace": (0, 1 << 16),
}
REQUIRED = ("vocab_size",)


def config_path(model: str) -> tuple[Path, Path]:
    """(`--model` made absolute, the config.json it names: the folder's, or the file itself)."""
    path = Path(model).expanduser().absolute()
    return path, (path / "config.json" if path.is_dir() else path)


def read_config(model: str) -> tuple[Path, Path, Any]:
    """(--model absolute, its config.json, the JSON it holds): UsageError where it cannot be read."""
    path, config = config_path(model)
    try:
        raw = read_regular(config, MAX_CONFIG)
    except FileNotFoundError:
        raise UsageError(f"--model {model}: {config} does not exist (give the model folder or its config.json)") from None
    except OSError as e:
        raise UsageError(f"--model {model}: {config}: {e.strerror or e} (give the model folder or its "
                         f"config.json)") from None
    try:
        return path, config, json.loads(raw.decode("utf-8"))
    except json.JSONDecodeError as e:
        raise UsageError(f"--model {model}: {config}:{e.lineno}: not JSON ({e.msg})") from None
    except UnicodeDecodeError as e:
        raise UsageError(f"--model {model}: {config}: not UTF-8 ({e.reason} at byte {e.start})") from None


def check_sizes(model: str, config: Path, data: dict[str, Any], wrapper: bool) -> None:
    """UsageError naming the file and the first field the rehearsal cannot build from: a required
    size missing, or a size that is not a whole number in `SIZES`' range. `wrapper`: the family's
    language model's config is `text_config`, where the sizes are read."""
    text: Any = data
    prefix = ""
    if wrapper:
        text, prefix = data.get("text_config"), "text_config."
        if not isinstance(text, dict):
            raise UsageError(f"--model {model}: {config}: no text_config object (this architecture's "
                             f"language model is sized there)")
    for field in REQUIRED:
        if text.get(field) is None:
            raise UsageError(f"--model {model}: {config}: no {prefix}{field} (the rehearsal sizes its "
                             f"tokenizer and prompts by it)")
    for field, (least, most) in SIZES.items():
        value = text.get(field)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= most:
            raise UsageError(f"--model {model}: {config}: {prefix}{field} is {json.dumps(value)}; the "
                             f"rehearsal needs a whole number from {least} to {most}")


def read_index(folder: Path) -> Any:
    """The checkpoint's `model.safetensors.index.json` (None: absent, unreadable, not a regular
    file, larger than `MAX_INDEX`, not JSON)."""
    try:
        return json.loads(read_regular(folder / "model.safetensors.index.json", MAX_INDEX).decode("utf-8"))
    except (OSError, ValueError):
        return None


def remote_code(data: Any) -> list[str]:
    """The files of the folder a config's `auto_map` names (`configuration_x.Cls` ->
    `configuration_x.py`; `repo--module.Cls` -> `module.py`), sorted; [] without one."""
    auto_map = data.get("auto_map") if isinstance(data, dict) else None
    if not isinstance(auto_map, dict):
        return []
    refs = [r for v in auto_map.values() for r in (v if isinstance(v, list) else [v]) if isinstance(r, str)]
    return sorted({r.split("--")[-1].rsplit(".", 1)[0] + ".py" for r in refs if "." in r})


def remote_code_line(model: str, config: Path, files: list[str]) -> str:
    """What the user decides on before the rehearsal runs: speculators loads a --model's config
    with trust_remote_code=True whatever --trust-remote-code says, so the folder's code runs."""
    return (f"--model {model}: {config} names code of the folder (auto_map: {', '.join(files)}); speculators "
            f"loads the config with trust_remote_code=True, so that code runs in the rehearsal, as it would "
            f"on the GPU box (--trust-remote-code or not)")

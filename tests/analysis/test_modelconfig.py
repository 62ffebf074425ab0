"""Issue 40, items 6 and 7: `--model` is read bounded (a regular config.json of at most
MAX_CONFIG bytes: no FIFO waited on, no device or folder read) and the sizes the rehearsal builds
from are checked before anything is written: one line naming the file and the field, exit 2."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import Sandbox

from vllm_shim_patch._remote.rehearse import families, model_folder, workload
from vllm_shim_patch.analysis import modelconfig
from vllm_shim_patch.analysis.rehearse import model_request
from vllm_shim_patch.errors import UsageError

LLAMA = {"architectures": ["LlamaForCausalLM"], "vocab_size": 128256, "num_hidden_layers": 32,
         "num_attention_heads": 32, "max_position_embeddings": 131072}


def _refused(model: str) -> str:
    with pytest.raises(UsageError) as e:
        model_request(model, None)
    return str(e.value)


def _folder(tmp_path: Path, config: object) -> Path:
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_a_fifo_a_device_and_a_folder_are_never_read(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    fifo.mkdir()
    os.mkfifo(fifo / "config.json")  # nobody writes to it: a blocking open or read would wait forever
    assert _refused(str(fifo)) == (f"--model {fifo}: {fifo}/config.json: not a regular file (a FIFO) (give the "
                                   f"model folder or its config.json)")
    assert _refused("/dev/zero") == ("--model /dev/zero: /dev/zero: not a regular file (a device) (give the model "
                                     "folder or its config.json)")
    nested = tmp_path / "nested"
    (nested / "config.json").mkdir(parents=True)
    assert _refused(str(nested)) == (f"--model {nested}: {nested}/config.json: not a regular file (a folder) "
                                     f"(give the model folder or its config.json)")


def test_a_config_larger_than_the_limit_is_read_no_further(tmp_path: Path) -> None:
    folder = tmp_path / "big"
    folder.mkdir()
    (folder / "config.json").write_bytes(b"{" + b" " * modelconfig.MAX_CONFIG + b"}")
    limit = modelconfig.MAX_CONFIG
    assert _refused(str(folder)) == (f"--model {folder}: {folder}/config.json: {limit + 2} bytes, more than the "
                                     f"{limit} read of it (give the model folder or its config.json)")


def test_a_config_link_is_followed_to_its_blob(tmp_path: Path) -> None:
    """A Hugging Face cache's snapshot holds links to its blobs: followed, where it is a file."""
    blob = tmp_path / "blobs" / "abc"
    blob.parent.mkdir()
    blob.write_text(json.dumps(LLAMA))
    snapshot = tmp_path / "snapshot"
    snapshot.mkdir()
    (snapshot / "config.json").symlink_to(blob)
    assert model_request(str(snapshot), None) == {"model": str(snapshot)}


@pytest.mark.parametrize(("change", "words"), [
    ({"vocab_size": None}, "no vocab_size (the rehearsal sizes its tokenizer and prompts by it)"),
    ({"vocab_size": 0}, "vocab_size is 0; the rehearsal needs a whole number from 4 to 1048576"),
    ({"vocab_size": 3}, "vocab_size is 3; the rehearsal needs a whole number from 4 to 1048576"),
    ({"vocab_size": 10**12}, "vocab_size is 1000000000000; the rehearsal needs a whole number from 4 to 1048576"),
    ({"vocab_size": "32000"}, 'vocab_size is "32000"; the rehearsal needs a whole number from 4 to 1048576'),
    ({"vocab_size": True}, "vocab_size is true; the rehearsal needs a whole number from 4 to 1048576"),
    ({"vocab_size": 32000.5}, "vocab_size is 32000.5; the rehearsal needs a whole number from 4 to 1048576"),
    ({"num_hidden_layers": -1}, "num_hidden_layers is -1; the rehearsal needs a whole number from 1 to 65536"),
    ({"max_position_embeddings": 10**12},
     "max_position_embeddings is 1000000000000; the rehearsal needs a whole number from 1 to 16777216"),
    ({"num_attention_heads": [32]}, "num_attention_heads is [32]; the rehearsal needs a whole number from 1 to 65536"),
], ids=["no-vocab", "vocab-0", "vocab-3", "vocab-huge", "vocab-text", "vocab-bool", "vocab-float", "layers",
        "positions", "heads-list"])
def test_a_size_the_rehearsal_cannot_build_from_names_the_file_and_field(
        tmp_path: Path, change: dict[str, object], words: str) -> None:
    config = {k: v for k, v in {**LLAMA, **change}.items() if v is not None}
    folder = _folder(tmp_path, config)
    assert _refused(str(folder)) == f"--model {folder}: {folder}/config.json: {words}"


def test_a_wrappers_sizes_are_read_in_its_text_config(tmp_path: Path) -> None:
    (arch,) = [a for a in families.FAMILIES["qwen3-vl"].ARCHITECTURES][:1]
    folder = _folder(tmp_path, {"architectures": [arch], "vocab_size": 151936})
    assert _refused(str(folder)) == (f"--model {folder}: {folder}/config.json: no text_config object (this "
                                     f"architecture's language model is sized there)")
    (folder / "config.json").write_text(json.dumps({"architectures": [arch], "text_config": {"vocab_size": 0}}))
    assert _refused(str(folder)) == (f"--model {folder}: {folder}/config.json: text_config.vocab_size is 0; the "
                                     f"rehearsal needs a whole number from 4 to 1048576")


def test_every_published_preset_passes() -> None:
    """The check is no tighter than the published configs the families stand in for."""
    for name in families.presets():
        family, config = families.preset(name)
        modelconfig.check_sizes(name, Path("config.json"), config, wrapper=bool(family.WRAPPER))


def test_the_least_vocabulary_is_one_the_workload_can_draw_from() -> None:
    assert modelconfig.FIRST_TOKEN == workload.FIRST_TOKEN
    assert modelconfig.SIZES["vocab_size"][0] == workload.FIRST_TOKEN + 1


def test_only_the_files_the_rehearsal_reads_are_copied(tmp_path: Path) -> None:
    src, dst = tmp_path / "checkpoint", tmp_path / "tiny"
    src.mkdir()
    dst.mkdir()
    kept = ["chat_template.jinja", "configuration_x.py", "generation_config.json", "merges.txt",
            "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json", "vocab.json"]
    left = ["README.md", "rust_model.ot", "flax_model.msgpack", "model.safetensors", "notes.txt", "LICENSE",
            "original_weights.tar"]
    for name in kept + left:
        (src / name).write_text(name)
    (src / "sub").mkdir()
    os.mkfifo(src / "added_tokens.json")  # a FIFO under a tokenizer's name: never opened
    model_folder.copy_folder(str(src), str(dst))
    assert sorted(os.listdir(dst)) == kept


@pytest.mark.slow
def test_apply_with_a_bad_model_writes_nothing(sandbox: Sandbox, tmp_path: Path) -> None:
    folder = _folder(tmp_path, {**LLAMA, "vocab_size": 0})
    before = sandbox.snapshot()
    r = sandbox.run("--json", "--vllm-version", "0.16", "--model", str(folder))
    message = (f"--model {folder}: {folder}/config.json: vocab_size is 0; the rehearsal needs a whole number "
               f"from 4 to 1048576")
    assert (r.returncode, r.stderr) == (2, f"patch-speculators: error: {message}\n")
    assert json.loads(r.stdout) == {"ok": False, "error": message, "kind": "UsageError"}
    assert not sandbox.state.exists()
    assert sandbox.snapshot() == before


def test_a_folders_own_config_code_is_said_where_the_user_decides(tmp_path: Path) -> None:
    """Issue 40, item 10: speculators loads --model's config with trust_remote_code=True, so an
    `auto_map` config's code runs in the rehearsal with or without --trust-remote-code: said
    before anything runs (apply and rehearse pass their log)."""
    kimi = families.preset("kimi-k2.5")[1]
    folder = _folder(tmp_path, {**kimi, "auto_map": {"AutoConfig": "configuration_kimi_k25.KimiK25Config",
                                                      "AutoModel": "org/repo--modeling_kimi.KimiModel",
                                                      "AutoTokenizer": ["tokenization_kimi.KimiTokenizer", None]}})
    said: list[str] = []
    assert model_request(str(folder), None, said.append) == {"model": str(folder)}
    assert said == [f"--model {folder}: {folder}/config.json names code of the folder (auto_map: "
                    f"configuration_kimi_k25.py, modeling_kimi.py, tokenization_kimi.py); speculators loads the "
                    f"config with trust_remote_code=True, so that code runs in the rehearsal, as it would on the "
                    f"GPU box (--trust-remote-code or not)"]
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "config.json").write_text(json.dumps(LLAMA))
    model_request(str(plain), None, said.append)
    assert len(said) == 1  # no auto_map: nothing to say

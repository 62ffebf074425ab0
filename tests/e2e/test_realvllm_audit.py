"""The audit with live signatures on the real vLLM 0.16.0 install: the same findings as the
static reader, the imports of other packages against the real distributions (and against vLLM
0.33.0's, under transformers 5, a CI release built when the cache lacks it), and a --vllm-version that contradicts
the install is an error."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from realdata import REFERENCE_VLLM
from conftest import E2E, GENERATOR, Sandbox, real_sandbox

pytestmark = [pytest.mark.realvllm, pytest.mark.slow]


def test_live_audit_finds_what_the_static_one_does(real: Sandbox) -> None:
    r = real.run("audit", "--json", timeout=900)
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["signatures"] == "live"
    not_ok = [(u["line"], u["kind"], u["callee"], u["reason"], u["rules"], u["fixed"])
              for u in data["uses"] if u["status"] != "ok" or (u["after"] and u["after"]["status"] != "ok")]
    assert not_ok == [
        (136, "call", "vllm.v1.core.kv_cache_utils.get_kv_cache_config_from_groups",
         "unexpected keyword argument 'kv_cache_specs'", ["kv-cache-config-drop-specs"], True),
        (148, "call", "vllm.v1.core.sched.scheduler.Scheduler", "missing required argument 'block_size'",
         ["scheduler-add-block-size"], True),
        (194, "call", "vllm.config.SchedulerConfig", "missing required argument 'is_encoder_decoder'",
         ["scheduler-config-add-is-encoder-decoder"], True),
    ]
    assert all(u["path"] == GENERATOR for u in data["uses"] if u["status"] != "ok")
    # The rules add 13 uses, each checked: block_size's two attribute reads, the data rules' collective_rpc
    # and the flush's execute_model, a sample_tokens after each step, and in custom_worker the capture
    # hooks' get_tp_group / get_pp_group and their rank_in_group / is_last_rank, and the request
    # tracking's read of the Worker's model runner's input_batch (V1's on 0.16).
    assert data["summary"] == {"uses": 74, "added": 13, "ok": 71, "fixed": 3, "remaining": 0, "unknown": 0, "call": 20,
                               "method": 10, "import": 21, "attribute": 10}
    assert sorted((u["line"], u["callee"].rsplit(".", 1)[-1]) for u in data["uses"] if u["added"]) == [
        (100, "get_tp_group"), (100, "rank_in_group"), (106, "get_pp_group"), (106, "get_tp_group"),
        (106, "is_last_rank"), (106, "rank_in_group"), (151, "block_size"), (151, "cache_config"), (154, "input_batch"), (269, "collective_rpc"), (272, "sample_tokens"),
        (283, "execute_model"), (285, "sample_tokens")]


def test_a_version_the_install_contradicts_is_an_error(real: Sandbox) -> None:
    before = real.snapshot()
    r = real.run("--vllm-version", "0.17", "--check")
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == (f"patch-speculators: error: --vllm-version 0.17 does not match the installed vLLM {REFERENCE_VLLM} "
                        f"in {real.python}: leave out --vllm-version, or give --python the interpreter that has "
                        f"vLLM 0.17\n")
    assert real.snapshot() == before


def test_the_imports_of_other_packages_are_answered_by_the_real_distributions(real: Sandbox) -> None:
    r = real.run("audit", timeout=900)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    start = next(i for i, text in enumerate(lines) if "of other packages, checked in the target" in text)
    # transformers 4.57 still has every module speculators 0.3.0 imports; what is left is what the
    # reference venv does not install (speculators' datasets requirement, the optional wandb and
    # tensorboard), each unknown, the latter two inside feature tests.
    assert lines[start:] == [
        "138 imports of other packages, checked in the target (click 8.5.1, huggingface_hub 0.36.2, loguru 0.7.3, "
        "numpy 2.2.6, pydantic 2.14.4, pydantic_core 2.50.5, rich 15.0.0, safetensors 0.8.0, torch 2.9.1, "
        "tqdm 4.70.1, transformers 4.57.6, typer 0.29.2, typing_extensions 4.16.0; not installed: datasets, wandb)",
        "  speculators/data_generation/preprocessing.py:6: import datasets.Dataset: unknown (not installed in the "
        "target; speculators requires datasets>=4.0.0) (and 2 more imports of datasets)",
        "  speculators/train/logger.py:68: import torch.utils.tensorboard.SummaryWriter: unknown (import of "
        "torch.utils.tensorboard fails: ModuleNotFoundError: No module named 'tensorboard'; under "
        "`if TYPE_CHECKING` at line 67)",
        "  speculators/train/logger.py:69: import wandb.Run: unknown (not installed in the target)",
        "  speculators/train/logger.py:298: import torch.utils.tensorboard.SummaryWriter: unknown (import of "
        "torch.utils.tensorboard fails: ModuleNotFoundError: No module named 'tensorboard'; in the "
        "try/except ImportError at line 297)",
        "74 uses: 71 ok, 3 fixed by the rules, 0 still mismatched, 0 unknown; "
        "138 imports of other packages: 132 ok, 0 fixed by the rules, 0 still mismatched, 6 unknown",
    ]


def test_under_transformers_5_20_every_import_of_other_packages_still_resolves(tmp_path: Path,
                                                                              speculators_wheel: Path) -> None:
    # vLLM 0.33.0 (transformers 5.20): built here when the cache lacks it, never skipped.
    proc = subprocess.run([sys.executable, str(E2E / "build_env.py"), "--vllm", "0.33.0", "--print-path"],
                          capture_output=True, text=True, timeout=3600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    python = Path(proc.stdout.strip().splitlines()[-1])
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          capture_output=True, text=True, check=True).stdout.strip()
    sb = real_sandbox(tmp_path, python, Path(site), speculators_wheel)
    r = sb.run("audit", timeout=900)
    lines = r.stdout.splitlines()
    start = next(i for i, text in enumerate(lines) if "of other packages, checked in the target" in text)
    # transformers 5.20.2 still has modeling_attn_mask_utils (5.24 removed it): what stops
    # speculators importing there is its own pydantic model_rebuild, not an import of transformers.
    # The rule for that (pydantic-rebuild-torch-namespace) adds `import torch` to
    # speculators/utils/pydantic_utils.py: one import the rules add, checked (ok) with the rest.
    assert lines[start:-1] == [
        "138 imports of other packages, checked in the target (click 8.5.1, huggingface_hub 2.4.0, loguru 0.7.3, "
        "numpy 2.3.5, pydantic 2.14.4, pydantic_core 2.50.5, rich 15.0.0, safetensors 0.8.0, torch 2.14.0, "
        "tqdm 4.70.1, transformers 5.20.2, typer 0.29.2, typing_extensions 4.16.0; not installed: datasets, wandb), "
        "and 1 the rules add",
        "  speculators/data_generation/preprocessing.py:6: import datasets.Dataset: unknown (not installed in the "
        "target; speculators requires datasets>=4.0.0) (and 2 more imports of datasets)",
        "  speculators/train/logger.py:68: import torch.utils.tensorboard.SummaryWriter: unknown (import of "
        "torch.utils.tensorboard fails: ModuleNotFoundError: No module named 'tensorboard'; under "
        "`if TYPE_CHECKING` at line 67)",
        "  speculators/train/logger.py:69: import wandb.Run: unknown (not installed in the target)",
        "  speculators/train/logger.py:298: import torch.utils.tensorboard.SummaryWriter: unknown (import of "
        "torch.utils.tensorboard fails: ModuleNotFoundError: No module named 'tensorboard'; in the "
        "try/except ImportError at line 297)",
    ]
    # Which uses of vLLM mismatch is the release rules' business (tests/e2e/test_releases_realvllm.py);
    # here, that each use the rules keep is paired with itself after them: the moved kv_cache calls
    # and num_blocks, after generator-kernel-block-size's inserted code, are not taken out and added
    # again (that counted 92 uses, 31 of them added).
    assert lines[0].endswith(": 61 uses of vLLM (20 calls, 10 method calls, 21 imports, 10 attribute reads), "
                             "and 27 the rules add")
    assert lines[-1] == ("88 uses: 82 ok, 6 fixed by the rules, 0 still mismatched, 0 unknown; "
                         "139 imports of other packages: 133 ok, 0 fixed by the rules, 0 still mismatched, 6 unknown")

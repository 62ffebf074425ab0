"""`audit --no-rules` asks the target in a thread while it opens --vllm-source: every error still
comes where and as it came before (the probe's first, then --vllm-source's), one line, exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from vllm_shim_patch.commands.context import Context
from vllm_shim_patch.errors import TargetError
from vllm_shim_patch.settings import Settings

PY = sys.executable


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PY, "-m", "vllm_shim_patch", *args, "--state-dir", str(tmp_path / "state"), "audit",
                           "--no-rules", "--json"], capture_output=True, text=True, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize(("args", "kind", "error"), [
    (("--python", "/nonexistent/python", "--vllm-source", "/nonexistent"), "TargetError",
     "interpreter '/nonexistent/python' not found (give --python the path of a python executable)"),
    (("--python", PY, "--package", "nosuchdist", "--vllm-source", "{empty}"), "TargetError",
     f"nosuchdist is not installed in {PY} (pass --python with the interpreter of your ML environment)"),
    (("--python", PY, "--package", "click", "--vllm-source", "/nonexistent"), "UsageError",
     "--vllm-source /nonexistent: no such file or folder (give vLLM's source folder or its wheel)"),
    (("--python", PY, "--package", "click", "--vllm-source", "{empty}", "--vllm-version", "0.16"), "SignatureError",
     "no vllm package under {empty}"),
])
def test_errors_come_in_their_order(tmp_path: Path, args: tuple[str, ...], kind: str, error: str) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    r = _run(tmp_path, *(a.format(empty=empty) for a in args))
    error = error.format(empty=empty)
    assert (r.returncode, json.loads(r.stdout), r.stderr) == (
        2, {"ok": False, "error": error, "kind": kind}, f"patch-speculators: error: {error}\n")
    assert not (tmp_path / "state").exists()


def test_the_probe_error_surfaces_at_target_not_at_start(tmp_path: Path) -> None:
    ctx = Context(Settings(python="/nonexistent/python", vllm_source=str(tmp_path / "none")))
    ctx.start_probe()  # neither the probe's error nor the missing source is raised here
    assert not ctx.vllm.opened
    with pytest.raises(TargetError, match=r"^interpreter '/nonexistent/python' not found"):
        ctx.target  # noqa: B018
    with pytest.raises(TargetError):  # asked again: probed again, as before
        ctx.target  # noqa: B018

"""`apply --wheel-out`: a wheel that cannot be written after apply passed says what was written
(the patch, applied and recorded), exit 1: never "nothing was written" (issue 40, item 3)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from vllm_shim_patch.commands import patched_wheel
from vllm_shim_patch.commands.context import Context, Outcome
from vllm_shim_patch.errors import TargetError
from vllm_shim_patch.settings import Settings
from vllm_shim_patch.target import Target

TARGET = Target(python="/env/bin/python", python_version="3.11.7", package="speculators", version="0.3.0",
                location=Path("/env/site"), record=(), editable=None, vllm_version="0.16.0",
                vllm_location=Path("/env/site/vllm"))


def test_a_wheel_that_cannot_be_written_after_apply_says_the_patch_is_written(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def save(*args: Any) -> None:
        raise TargetError(f"cannot write {tmp_path}/w.whl (No space left on device); nothing was written")

    monkeypatch.setattr(patched_wheel, "patched_here", lambda ctx: {"kind": "patch"})
    monkeypatch.setattr(patched_wheel, "build_here", lambda ctx, trailers, original: None)
    monkeypatch.setattr(patched_wheel, "save", save)
    ctx = Context(Settings(python=TARGET.python))
    ctx.probe._target = TARGET
    applied = Outcome("patched speculators 0.3.0 for vLLM 0.16: 22 edits in 2 files", {"ok": True}, 0)
    out = patched_wheel.write_out(ctx, patched_wheel.WheelOut(tmp_path, None), applied)  # type: ignore[arg-type]
    line = (f"no wheel written: cannot write {tmp_path}/w.whl (No space left on device); the patch itself is "
            f"applied and recorded (speculators 0.3.0)")
    assert (out.exit_code, out.data["wheel"], out.data["error"], out.notes[-1]) == (1, None, line, line)
    assert out.text == applied.text

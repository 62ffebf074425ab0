"""`apply --wheel-out`: a wheel that cannot be written after apply passed says what was written
(the patch, applied and recorded), exit 1: never "nothing was written" (issue 40, item 3)."""

from __future__ import annotations

from dataclasses import replace
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
    monkeypatch.setattr(patched_wheel, "build_here", lambda ctx, trailers, original, plan: None)
    monkeypatch.setattr(patched_wheel, "save", save)
    ctx = Context(Settings(python=TARGET.python))
    ctx.probe._target = TARGET
    applied = Outcome("patched speculators 0.3.0 for vLLM 0.16: 22 edits in 2 files", {"ok": True}, 0)
    out = patched_wheel.write_out(ctx, patched_wheel.WheelOut(tmp_path, None), applied, None)  # type: ignore[arg-type]
    line = (f"no wheel written: cannot write {tmp_path}/w.whl (No space left on device); the patch itself is "
            f"applied and recorded (speculators 0.3.0)")
    assert (out.exit_code, out.data["wheel"], out.data["error"], out.notes[-1]) == (1, None, line, line)
    assert out.text == applied.text


def test_a_wheel_rollback_whose_pip_fails_says_what_pip_left(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Issue 40, item 3: pip failing part-way through the reinstall (a stand-in: it leaves its
    `~peculators` stash and the release installed, as the round saw) is said as it is, never
    "nothing was written"."""
    from types import SimpleNamespace

    from vllm_shim_patch import target as target_module
    from vllm_shim_patch.commands import installed
    from vllm_shim_patch.fleet import scratch
    from vllm_shim_patch.options import RollbackOptions

    site = tmp_path / "site"
    site.mkdir()

    def pip_install(python: str, wheels: Path, requirement: str, *, force: bool = False) -> None:
        (site / "~peculators").mkdir()
        raise TargetError(f"cannot install {requirement} with pip into {python}: ERROR: could not install "
                          f"packages due to an OSError; nothing was written")

    monkeypatch.setattr(scratch, "write_original", lambda files, folder: (folder / "w.whl", "speculators===0.3.0"))
    monkeypatch.setattr(scratch, "pip_install", pip_install)
    monkeypatch.setattr(target_module, "probe", lambda python, package: replace(TARGET, location=site))
    provenance = SimpleNamespace(package="speculators", release="0.3.0", version="0.3.0+vsp.vllm0.16", series="0.16",
                                 vllm_requirement="vllm==0.16.*", built_for="0.16.0", signatures="static", rules=(),
                                 rules_digest="", files={}, verification="", rehearsal=SimpleNamespace(), tool="t")
    wheel = SimpleNamespace(provenance=provenance, drift=lambda target: [], original_files=lambda target: {})
    ctx = Context(Settings(python=TARGET.python))
    ctx.probe._target = replace(TARGET, version="0.3.0+vsp.vllm0.16")
    out = installed.rollback(ctx, RollbackOptions(), wheel)  # type: ignore[arg-type]
    assert out.exit_code == 1
    assert out.text == (
        f"speculators 0.3.0+vsp.vllm0.16: pip failed while reinstalling speculators 0.3.0 (cannot install "
        f"speculators===0.3.0 with pip into /env/bin/python: ERROR: could not install packages due to an OSError); "
        f"installed now: speculators 0.3.0; pip left ~peculators in {site} (its stash of the files it replaced): "
        f"remove it once the install is settled; finish by hand: pip install --force-reinstall --no-deps "
        f"'speculators===0.3.0'")
    assert "nothing was written" not in out.text
    assert (out.data["installed"], out.data["left_by_pip"]) == ("speculators 0.3.0", ["~peculators"])


def test_wheel_out_builds_from_the_plan_its_apply_wrote(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # Not planned again: the wheel's gate takes the plan object apply's transaction wrote, and
    # None (planned again) only where apply hands none back (a review that declined hunks).
    from vllm_shim_patch.commands import apply as apply_cmd
    from vllm_shim_patch.commands.patch import Patched
    from vllm_shim_patch.settings import ApplyOptions

    wrote, handed = object(), []
    applied = Outcome("patched", {"ok": True}, 0)
    out = patched_wheel.WheelOut(tmp_path, None)  # type: ignore[arg-type]
    monkeypatch.setattr(patched_wheel, "prepare_out", lambda ctx, opts: out)

    def write_out(ctx: Any, where: Any, outcome: Outcome, plan: Any) -> Outcome:
        handed.append((where, outcome, plan))
        return outcome

    monkeypatch.setattr(patched_wheel, "write_out", write_out)
    for plan in (wrote, None):
        monkeypatch.setattr(apply_cmd, "patch", lambda ctx, opts, plan=plan: Patched(applied, plan))  # type: ignore[misc]
        assert apply_cmd.wheel_out(Context(Settings()), ApplyOptions(wheel_out=str(tmp_path))) is applied
    assert handed == [(out, applied, wrote), (out, applied, None)]

"""What a rehearsal's answer becomes in the `rehearse` command: the verdict line and the exit
code, with the target session stood in (its answer is what `_remote/rehearse/` returns, the
watchdog's included: simulated here, no wall-clock wait)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from vllm_shim_patch._remote.rehearse import answer
from vllm_shim_patch.analysis import rehearse as tool_side
from vllm_shim_patch.analysis import session
from wire import on_the_wire
from vllm_shim_patch.commands.context import Context
from vllm_shim_patch.commands.rehearse import rehearse
from vllm_shim_patch.options import RehearseOptions
from vllm_shim_patch.settings import Settings
from vllm_shim_patch.target import Target

TARGET = Target(python="/env/bin/python", python_version="3.11.7", package="speculators", version="0.3.0",
                location=Path("/env/site"), record=(), editable=None, vllm_version="0.16.0",
                vllm_location=Path("/env/site/vllm"))
TIMED_OUT = "cannot rehearse: timed out after 900 s (the machine is busy? pass --timeout)"


def _run(monkeypatch: pytest.MonkeyPatch, reply: dict[str, Any] | answer.Answer, **options: Any) -> tuple[Any, list[dict[str, Any]]]:
    asked: list[dict[str, Any]] = []

    def run_session(target: Target, **request: Any) -> session.SessionAnswer:
        asked.append(request["rehearse"].to_json())  # what goes on the wire
        return session.SessionAnswer(None, None, on_the_wire(reply))

    monkeypatch.setattr(session, "run_session", run_session)
    ctx = Context(Settings(python=TARGET.python))
    ctx.probe._target = TARGET
    return rehearse(ctx, RehearseOptions(**options)), asked


@pytest.mark.parametrize("stage", ["import", "self-check", "generate-2", "verify-3"])
def test_running_out_of_time_cannot_rehearse_exit_2_wherever_the_run_was(
        monkeypatch: pytest.MonkeyPatch, stage: str) -> None:
    run = answer.Run()
    run.stage = stage
    watchdog = answer.timed_out(run, tool_side.TIMEOUT)  # what the session's watchdog answers
    out, asked = _run(monkeypatch, watchdog)
    assert asked[0]["timeout"] == 900.0  # the default
    assert out.exit_code == 2
    assert out.text == f"speculators 0.3.0 on vLLM 0.16.0: rehearsal could not run: {TIMED_OUT}"
    assert (out.data["ok"], out.data["outcome"], out.data["stage"], out.data["failure"]) == (
        False, "timeout", stage, {"exception": TIMED_OUT})
    assert out.data["fixes"] == [] and out.data["pending_rules"] == []


def test_the_timeout_option_is_what_the_target_is_given_and_what_the_message_says(
        monkeypatch: pytest.MonkeyPatch) -> None:
    out, asked = _run(monkeypatch, answer.timed_out(answer.Run(), 5), timeout=5.0)
    assert asked[0]["timeout"] == 5.0
    assert (out.exit_code, out.text.rsplit(": ", 2)[-2:]) == (
        2, ["cannot rehearse", "timed out after 5 s (the machine is busy? pass --timeout)"])


@pytest.mark.parametrize(("outcome", "code"), [("passed", 0), ("failed", 1), ("cannot_rehearse", 2),
                                               ("no_model_class", 2), ("timeout", 2), ("error", 2)])
def test_each_outcome_has_its_exit_code(monkeypatch: pytest.MonkeyPatch, outcome: str, code: int) -> None:
    reply = {"ok": outcome == "passed", "outcome": outcome, "stage": "generate-1", "iterations": 1,
             "failure": None if outcome == "passed" else {"exception": "x"}}
    if outcome in ("failed", "cannot_rehearse"):
        monkeypatch.setattr(Context, "plan", lambda self, *a, **k: None)  # no rule to name: no plan needed
    assert _run(monkeypatch, reply)[0].exit_code == code



def test_a_vllm_without_the_model_class_says_so_not_that_it_cannot_rehearse(monkeypatch: pytest.MonkeyPatch) -> None:
    run = answer.Run()
    run.stage = "setup"
    reply = answer.answer(run, False, answer.NO_MODEL_CLASS,
                          answer.NoModelClass("KimiK25ForConditionalGeneration", "0.15.0").failure())
    out, _ = _run(monkeypatch, reply, quick=True)
    assert out.exit_code == 2
    assert out.text == (
        "speculators 0.3.0 on vLLM 0.16.0: rehearsal not run: this vLLM has no model class for "
        "KimiK25ForConditionalGeneration (it cannot load your model, patched or not; first release with it: 0.15.0)")
    assert (out.data["outcome"], out.data["failure"]["architecture"], out.data["failure"]["first_release"]) == (
        "no_model_class", "KimiK25ForConditionalGeneration", "0.15.0")
    assert "cannot rehearse" not in out.text


def test_the_help_says_the_default_timeout() -> None:
    from click.testing import CliRunner

    from vllm_shim_patch.cli import main

    out = CliRunner().invoke(main, ["rehearse", "--help"])
    assert out.exit_code == 0, out.output
    assert f"give up after this long (default: {tool_side.TIMEOUT:g})" in " ".join(out.output.split())


@pytest.mark.parametrize(("outcome", "kind"), [("cannot_rehearse", "CannotRehearse"), ("no_model_class", "NoModelClass"),
                                               ("timeout", "RehearsalTimeout"), ("error", "RehearsalError")])
def test_exit_2_carries_error_and_kind(monkeypatch: pytest.MonkeyPatch, outcome: str, kind: str) -> None:
    """Issue 40, item 9: the README's exit-2 contract, `error` and `kind` under --json, for the
    rehearsal that gave no verdict too (the error is the verdict line)."""
    reply = {"ok": False, "outcome": outcome, "stage": "generate-1", "iterations": 1,
             "failure": {"exception": "x", "architecture": "A", "first_release": "0.1.0"}}
    if outcome == "cannot_rehearse":
        monkeypatch.setattr(Context, "plan", lambda self, *a, **k: None)
    out = _run(monkeypatch, reply)[0]
    assert out.exit_code == 2
    assert (out.data["error"], out.data["kind"]) == (out.text.splitlines()[-1], kind)
    assert out.data["error"].startswith("speculators 0.3.0 on vLLM 0.16.0: rehearsal ")


def test_the_cli_holds_every_exit_2_to_the_json_contract(monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from vllm_shim_patch import cli
    from vllm_shim_patch.commands.context import Outcome

    with pytest.raises(SystemExit) as e:
        cli.emit(Settings(as_json=True), Outcome("first\nthe reason", {"ok": False}, 2))
    assert e.value.code == 2
    assert json.loads(capsys.readouterr().out) == {"ok": False, "error": "the reason", "kind": "Error"}

"""Typed options: one frozen object per command, an unknown key is an error, options given on
both sides of the command name merge, and `rules docs` speaks JSON."""

from __future__ import annotations

import dataclasses
import inspect
import json
import subprocess
import sys
from pathlib import Path

import pytest

from vllm_shim_patch.settings import (
    ApplyOptions,
    AuditOptions,
    CliOptions,
    DiffOptions,
    NoOptions,
    RehearseOptions,
    RollbackOptions,
    RulesOptions,
    Settings,
    VerifyOptions,
)

OPTIONS = [ApplyOptions, AuditOptions, DiffOptions, NoOptions, RehearseOptions, RollbackOptions, RulesOptions, VerifyOptions]


@pytest.mark.parametrize("kind", [Settings, *OPTIONS], ids=lambda k: k.__name__)
def test_an_unknown_key_is_an_error(kind: type) -> None:
    with pytest.raises(TypeError, match=rf"^{kind.__name__} has no option 'pythn' \(known: "):
        kind.from_options({"pythn": "x"})


@pytest.mark.parametrize("kind", [Settings, CliOptions, *OPTIONS], ids=lambda k: k.__name__)
def test_options_are_frozen(kind: type) -> None:
    value = kind()
    with pytest.raises(dataclasses.FrozenInstanceError):
        value.x = 1


def test_given_options_go_on_top_of_the_base_and_both_rules_lists_count() -> None:
    base = Settings.from_options({"rules": ("a.yaml",), "verbose": 2, "package": "p"})
    merged = Settings.from_options({"rules": ("b.yaml", "a.yaml"), "verbose": 0, "package": None,
                                    "as_json": True}, base)
    assert merged == Settings(package="p", rules=("a.yaml", "b.yaml"), verbose=2, as_json=True)
    apply = ApplyOptions.from_options({"wait": True, "dry_run": None})
    assert ApplyOptions.from_options({"check": True}, apply) == ApplyOptions(wait=True, check=True)


def _commands() -> list[tuple[str, object]]:
    from vllm_shim_patch.commands import apply, audit, check, diff, history, rehearse, rollback, rules, status, verify

    found = [(m.__name__, getattr(m, n)) for m, n in [
        (apply, "apply"), (audit, "audit"), (check, "check"), (diff, "diff"), (history, "history"),
        (rehearse, "rehearse"), (rollback, "rollback"), (status, "status"), (verify, "verify"),
        (rules, "rules_list"), (rules, "rules_check"), (rules, "rules_test"), (rules, "rules_docs")]]
    return found


@pytest.mark.parametrize(("module", "command"), _commands(), ids=lambda v: v if isinstance(v, str) else "")
def test_every_command_has_one_shape(module: str, command: object) -> None:
    assert callable(command)
    signature = inspect.signature(command)
    assert list(signature.parameters) == ["ctx", "opts"]
    assert signature.return_annotation == "Outcome"
    assert signature.parameters["opts"].annotation in {k.__name__ for k in OPTIONS}


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    # No time limit (a unit test's outcome never depends on the machine's load); no terminal to wait on.
    return subprocess.run([sys.executable, "-m", "vllm_shim_patch", *args], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL)


def test_rules_docs_honours_json() -> None:
    from vllm_shim_patch.report.rules import rows
    from vllm_shim_patch.rules.loader import load_pack

    r = _cli("rules", "docs", "--json")
    assert (r.returncode, r.stderr) == (0, "")
    assert json.loads(r.stdout) == rows(load_pack().rules)
    assert [row["id"] for row in json.loads(r.stdout)] == [rule.id for rule in load_pack().rules]


def test_json_before_the_command_name_reaches_the_error_boundary(tmp_path: Path) -> None:
    r = _cli("--json", "rules", "check", str(tmp_path / "nope.yaml"))
    error = f"{tmp_path}/nope.yaml: no such rule file or folder"
    assert (r.returncode, json.loads(r.stdout)) == (2, {"ok": False, "error": error, "kind": "RuleError"})

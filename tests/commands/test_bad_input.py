"""Issue 11: every bad input is one line on stderr, exit 2, JSON under --json, and nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import Sandbox, scoped_codemod_rule

from vllm_shim_patch.cli import main


def _json_error(stdout: str) -> dict[str, object]:
    data = json.loads(stdout)
    assert data["ok"] is False
    return data


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--bogus"], "No such option '--bogus'. Did you mean '--verbose'? (see patch-speculators --help)"),
        (["rollback", "--nope"], "No such option '--nope'. Did you mean '--to'? (see patch-speculators rollback --help)"),
        (["--python"], "Option '--python' requires an argument. (see patch-speculators --help)"),
    ],
    ids=["unknown-option", "unknown-subcommand-option", "missing-value"],
)
@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_click_usage_errors_are_one_line_and_json(args: list[str], message: str, as_json: bool) -> None:
    result = CliRunner().invoke(main, [*args, "--json"] if as_json and args != ["--python"] else
                                ["--json", *args] if as_json else args, prog_name="patch-speculators")
    assert result.exit_code == 2
    assert result.stderr == f"patch-speculators: error: {message}\n"
    if as_json:
        assert _json_error(result.stdout) == {"ok": False, "error": message, "kind": "UsageError"}
    else:
        assert result.stdout == ""


def test_interactive_without_a_terminal_is_a_json_error() -> None:
    result = CliRunner().invoke(main, ["--json", "-i"], input="")
    assert result.exit_code == 2
    assert result.stderr == "patch-speculators: error: --interactive needs a terminal on standard input\n"
    assert _json_error(result.stdout)["kind"] == "UsageError"


@pytest.mark.slow
def test_bad_vllm_version_records_nothing(sandbox: Sandbox) -> None:
    before = sandbox.snapshot()
    r = sandbox.run("--json", "--vllm-version", "garbage")
    assert r.returncode == 2
    assert r.stderr == ("patch-speculators: error: --vllm-version 'garbage' is not a version like 0.16 or "
                        "0.16.1.dev45+g1a2b3c4\n")
    assert _json_error(r.stdout)["kind"] == "UsageError"
    assert not sandbox.state.exists()  # no overlay, no lock, not even the folder
    assert sandbox.snapshot() == before


@pytest.mark.slow
def test_no_rule_for_the_version_records_nothing(sandbox: Sandbox) -> None:
    r = sandbox.run("--vllm-version", "0.9")
    assert r.returncode == 2
    assert r.stderr == "patch-speculators: error: no rule applies to vLLM 0.9 (the earliest rule is for 0.10.0)\n"
    assert not sandbox.state.exists()


@pytest.mark.slow
def test_rollback_to_a_missing_ref_of_an_untracked_package_is_an_error(sandbox: Sandbox) -> None:
    r = sandbox.run("--json", "rollback", "--to", "no-such-state")
    assert r.returncode == 2
    message = ("no state 'no-such-state': speculators 0.3.0 is not tracked (this tool never recorded it), "
               "so there is nothing to roll back to")
    assert r.stderr == f"patch-speculators: error: {message}\n"
    assert _json_error(r.stdout) == {"ok": False, "error": message, "kind": "OverlayError"}
    assert not sandbox.state.exists()


@pytest.mark.slow
@pytest.mark.parametrize("where", ["import", "transform"])
def test_a_codemod_calling_system_exit_0_fails_the_run(sandbox: Sandbox, tmp_path: Path, where: str) -> None:
    rules = scoped_codemod_rule(tmp_path, "quits", "speculators.data_generation.custom_worker",
                                "raise SystemExit(0)", "raise SystemExit(0)\n" if where == "import" else "")
    before = sandbox.snapshot()
    r = sandbox.run("--rules", str(rules), "--vllm-version", "0.16")
    if where == "import":
        assert r.returncode == 2
        assert r.stderr == (f"patch-speculators: error: {rules}:3: rule 'quits': codemod 'quits' "
                            f"({tmp_path}/codemods/quits.py) calls SystemExit(0) at import (a codemod must "
                            f"not end the run)\n")
        assert not sandbox.state.exists()  # refused before the original was recorded
    else:
        assert r.returncode == 1, r.stderr
        assert r.stdout.strip() == (
            "nothing written: speculators/data_generation/custom_worker.py: "
            "rule quits: codemod 'quits' calls SystemExit(0) (a codemod must not end the run)"
        )
    assert sandbox.snapshot() == before


@pytest.mark.parametrize("to", ["", "  "], ids=["empty", "blank"])
def test_rollback_to_an_empty_ref_is_an_error_not_the_original(to: str) -> None:
    """Issue 40, item 10: `rollback --to "$REF"` with the variable unset must not roll back to the
    original; refused before the target is asked anything."""
    result = CliRunner().invoke(main, ["--json", "--python", "/nonexistent/python", "rollback", "--to", to])
    message = ("--to is empty: give a state (a commit or tag: see `patch-speculators log`), or leave out --to to "
               "roll back to the original; nothing was changed")
    assert result.exit_code == 2
    assert result.stderr == f"patch-speculators: error: {message}\n"
    assert _json_error(result.stdout) == {"ok": False, "error": message, "kind": "UsageError"}

"""The target interpreter (`--python`) misbehaving: a banner, bytes that are not UTF-8, no exec bit,
no answer, a silent death, an empty value: each is one line, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import Sandbox
from inprocess import ERROR, cli


def test_python_printing_non_utf8_bytes_is_one_line(tmp_path: Path) -> None:
    liar = tmp_path / "python"
    liar.write_text('#!/bin/sh\nprintf "\\377\\376junk\\n"\n')
    liar.chmod(0o755)
    code, out, err = cli("--python", str(liar), "status")
    assert (code, out) == (2, "")
    assert err == f"{ERROR}interpreter {str(liar)!r} gave an unreadable answer: '\ufffd\ufffdjunk\\n'\n"


def _script(tmp_path: Path, body: str, name: str = "python") -> Path:
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


@pytest.mark.slow
def test_python_printing_a_banner_before_the_answer_is_one_line(sandbox: Sandbox, tmp_path: Path) -> None:
    wrapper = _script(tmp_path, f'echo "activating env"\nexec {sandbox.python} "$@"\n')
    code, out, err = cli("--python", str(wrapper), "--json", "status")
    assert code == 2
    assert err.startswith(f"{ERROR}interpreter {str(wrapper)!r} gave an unreadable answer: 'activating env\\n{{")
    assert err.count("\n") == 1
    assert json.loads(out)["kind"] == "TargetError"


def test_python_that_is_not_executable_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "python"
    path.write_text("print(1)\n")
    assert cli("--python", str(path), "status") == (2, "", f"{ERROR}interpreter {str(path)!r} is not executable\n")


def test_python_that_never_answers_times_out_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from vllm_shim_patch import target

    monkeypatch.setattr(target, "PROBE_TIMEOUT", 1.0)
    hangs = _script(tmp_path, "exec sleep 30\n")
    assert cli("--python", str(hangs), "status") == (
        2, "", f"{ERROR}interpreter {str(hangs)!r} did not answer within 1s\n")


@pytest.mark.parametrize("value", ["", " "], ids=["empty", "blank"])
def test_an_empty_python_never_falls_back_to_the_tools_own(value: str) -> None:
    # `--python "$ENV_PY"` with the variable unset patched the tool's own environment's package.
    message = "--python is empty: give the path of the ML environment's python (or its venv folder)"
    code, out, err = cli("--python", value, "--json", "--check", "--vllm-version", "0.16")
    assert (code, err) == (2, f"{ERROR}{message}\n")
    assert json.loads(out) == {"ok": False, "error": message, "kind": "UsageError"}


@pytest.mark.parametrize(("body", "how"), [("exit 3\n", "exit 3"), ("kill -9 $$\n", "killed by signal 9")],
                         ids=["exit-3", "sigkill"])
def test_python_that_dies_silently_says_how(tmp_path: Path, body: str, how: str) -> None:
    dies = _script(tmp_path, body)
    assert cli("--python", str(dies), "status") == (
        2, "", f"{ERROR}interpreter {str(dies)!r} failed to run the probe: (no output, {how})\n")


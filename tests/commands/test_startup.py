"""`--help` and `status` must not pay for libcst, GitPython or PyYAML (speed is measured in bench/)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import Sandbox

HEAVY = ("libcst", "git", "gitdb", "yaml")


def imported_modules(*args: str) -> set[str]:
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "vllm_shim_patch", *args],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    names = set()
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip())
    assert "vllm_shim_patch.cli" in names
    return names


def heavy(names: set[str]) -> list[str]:
    return sorted(n for n in names if n.split(".")[0] in HEAVY)


@pytest.mark.parametrize("args", [["--help"], ["status", "--help"], ["rules", "--help"]], ids=" ".join)
def test_help_imports_nothing_heavy(args: list[str]) -> None:
    assert heavy(imported_modules(*args)) == []


def test_help_makes_only_the_options_it_lists() -> None:
    # The program's --help lists apply's options; the other commands' types (options.py) and the
    # enums (kinds.py) cost it their classes' creation and are made when a command needs them.
    names = imported_modules("--help")
    assert {"vllm_shim_patch.settings", "vllm_shim_patch.commands"} <= names
    assert sorted(names & {"vllm_shim_patch.options", "vllm_shim_patch.kinds", "json"}) == []
    assert "vllm_shim_patch.options" in imported_modules("rehearse", "--help")


@pytest.mark.slow
def test_status_imports_nothing_heavy(sandbox: Sandbox) -> None:
    assert sandbox.run("--vllm-version", "0.16").returncode == 0
    names = imported_modules("--python", str(sandbox.python), "--state-dir", str(sandbox.state), "status")
    assert "vllm_shim_patch.commands.status" in names
    assert heavy(names) == []

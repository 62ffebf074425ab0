"""The CLI run in this process, as a user would see it: exit code, stdout, stderr."""

from __future__ import annotations

from click.testing import CliRunner

from vllm_shim_patch.cli import main

ERROR = "patch-speculators: error: "


def cli(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args), prog_name="patch-speculators")
    return result.exit_code, result.stdout, result.stderr

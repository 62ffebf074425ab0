"""Every command, in one table (`COMMANDS`): the CLI builds itself from it, and a test holds each
entry to one shape.

A command is a module here defining `NAME(ctx, opts) -> Outcome` over a shared `Context`
(`context.py`), its options a frozen `CommandOptions` in `settings.py` (each field declared with
`settings.option`, which spells it on the command line), its words in `report/`, and one entry
below. Nothing else: the CLI gives it the common options, the `Settings` its entry names, and its
own options, and prints what it returns. The modules are imported when their command runs, so
`--help` loads none of them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import settings as _settings

if TYPE_CHECKING:
    from ..settings import CommandOptions
    from .context import Context, Outcome


@dataclass(frozen=True)
class Command:
    """One command of the table."""

    name: str  # as typed after the program's name: "status", "rules list" (a group's command)
    # Its own options: the name of a type in `settings` or else in `options` (imported when the
    # command runs or its own --help is asked for, so `--help` makes no type it does not list).
    options_type: str
    help: str  # what `--help` says of it
    settings: tuple[str, ...] = ()  # the `Settings` fields it takes beyond the common ones, in order
    function: str = ""  # "module:function" in this package; default: the name's first word, its words joined by _
    # (option, "module:function"): the first whose option is given runs instead of `function`, with
    # the same options (`apply --dry-run` is the diff, `--check` the check): the command never routes.
    modes: tuple[tuple[str, str], ...] = ()

    @property
    def options(self) -> type[CommandOptions]:
        """The type of its own options."""
        found = getattr(_settings, self.options_type, None)
        if found is None:
            from .. import options

            found = getattr(options, self.options_type)
        assert isinstance(found, type) and issubclass(found, _settings.CommandOptions), self.options_type
        return found

    @property
    def where(self) -> tuple[str, str]:
        """The module (in this package) and the function that run the command."""
        if self.function:
            return _split(self.function)
        words = self.name.split()
        return words[0], "_".join(words)

    def chosen(self, opts: CommandOptions | None = None) -> tuple[str, str]:
        """The module and function that run the command with `opts`: its first mode whose option
        is given, else `where`."""
        for option, function in self.modes:
            if opts is not None and getattr(opts, option) not in (None, False):
                return _split(function)
        return self.where

    def load(self, opts: CommandOptions | None = None) -> Callable[[Context, Any], Outcome]:
        """The function that runs the command with `opts` (its module imported now)."""
        module, function = self.chosen(opts)
        # __import__, not importlib.import_module: -X importtime (the startup test, bench/) sees
        # only the imports made through the interpreter's own import path.
        found: Callable[[Context, Any], Outcome] = getattr(__import__(f"{__name__}.{module}", fromlist=[function]),
                                                            function)
        return found


def _split(function: str) -> tuple[str, str]:
    module, _, name = function.partition(":")
    return module, name


DEFAULT = "apply"  # what runs when no command is named (the program takes its options too)
GROUPS = {"rules": "List, validate and test rule files."}  # a group's help: its commands are "rules NAME"

COMMANDS: tuple[Command, ...] = (
    Command("apply", "ApplyOptions", "Write the planned edits, verify, record (the default command).",
            settings=("vllm_version", "model", "arch", "tensor_parallel_size", "pipeline_parallel_size", "no_guard"),
            modes=(("dry_run", "diff:dry_run"), ("check", "check:check"), ("wheel_out", "apply:wheel_out"))),
    Command("diff", "DiffOptions", "Print the diff apply would write, rule by hunk (--installed: the patch as installed).",
            settings=("vllm_version", "no_guard")),
    Command("status", "NoOptions", "Original, patched, drifted, interrupted or not tracked."),
    Command("log", "NoOptions", "Show the overlay's history, newest first.", function="history:history"),
    Command("rollback", "RollbackOptions", "Write the original bytes back, checked against RECORD."),
    Command("verify", "VerifyOptions", "Import changed modules, bind their calls into vLLM."),
    Command("rehearse", "RehearseOptions",
            "Run speculators' generator on CPU against the installed vLLM (exit 0 pass, 1 failure, 2 cannot run).",
            settings=("model", "arch", "tensor_parallel_size", "pipeline_parallel_size")),
    Command("wheel", "WheelOptions",
            "Build the patched speculators wheel for a vLLM series (pip/uv install it on every box).",
            settings=("vllm_version", "model", "arch", "tensor_parallel_size", "pipeline_parallel_size")),
    Command("audit", "AuditOptions",
            "Check every use of vLLM (imports, calls, methods, attributes), as installed and after the rules.",
            settings=("vllm_version",)),
    Command("rules list", "NoOptions", "List the loaded rules."),
    Command("rules check", "RulesOptions", "Validate rule files (default: the bundled ones and --rules)."),
    Command("rules test", "RulesOptions", "Run the before/after examples embedded in rule files."),
    Command("rules docs", "NoOptions", "Print the rules as a Markdown table (the README's is this; --json: its rows)."),
)


def command(name: str) -> Command:
    """The entry of `name` ("apply", "rules list")."""
    for entry in COMMANDS:
        if entry.name == name:
            return entry
    raise KeyError(name)

"""The `patch-speculators` command: parse options, call a command, print its outcome.

Exit codes: 0 ok; 1 a check or verification failed, or something was left undone (a file
skipped, a site left for a human); 2 usage or input error. Every command comes from the table
`commands.COMMANDS` (none is written here); only click, the standard library, that table and
`settings` are imported at module level, so `--help` and `status` start fast. Nothing imports
this module but `__main__`.
"""

from __future__ import annotations

import sys
import typing
from dataclasses import Field, fields, replace
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

from .commands import COMMANDS, DEFAULT, GROUPS, Command
from .settings import ApplyOptions, CliOptions, CommandOptions, Opt, Settings, spelling

if TYPE_CHECKING:
    from .commands.context import Context, Outcome
    from .report.diff import Hunk

PROG = "patch-speculators"


class _Group(click.Group):
    """The one error boundary: a PatchError or a usage error is one line (and JSON under --json),
    exit 2; anything else is a bug and keeps its traceback."""

    def main(self, args: Any = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        argv = list(sys.argv[1:] if args is None else args)
        from . import interrupts

        previous = interrupts.install()
        try:
            self._main(argv, prog_name, complete_var, **extra)
        finally:
            interrupts.restore(previous)  # an embedding caller (a test's CliRunner) gets its own back

    def _main(self, argv: list[str], prog_name: str | None, complete_var: str | None, **extra: Any) -> NoReturn:
        try:
            rv = super().main(argv, prog_name, complete_var, standalone_mode=False, **extra)
        except click.ClickException as exc:
            # click's own errors (unknown option, bad value) come before our options are parsed:
            # --json is looked for among the words themselves.
            as_json = "--json" in argv[: argv.index("--")] if "--" in argv else "--json" in argv
            where = exc.ctx.command_path if isinstance(exc, click.UsageError) and exc.ctx else PROG
            message = f"{exc.format_message()} (see {where} --help)"
            if as_json:
                click.echo(_json({"ok": False, "error": message, "kind": "UsageError"}))
            fail(message, exc.exit_code)
        except click.Abort:
            # Ctrl-C (or EOF at a prompt), or SIGTERM: not a failed check, so not exit 1; 130 or 143
            # as a shell says it. Every temp folder was removed on the way here (the interrupt
            # unwound through each `with`; the target's are inside the session's: analysis/session.py).
            from .interrupts import terminated

            words, code = ("terminated", 143) if terminated else ("interrupted", 130)
            if "--json" in argv:
                click.echo(_json({"ok": False, "error": words, "kind": "Interrupted"}))
            click.echo(f"{PROG}: {words}", err=True)
            sys.exit(code)
        sys.exit(rv if isinstance(rv, int) else 0)

    def invoke(self, ctx: click.Context) -> Any:
        from .errors import PatchError

        try:
            return super().invoke(ctx)
        except PatchError as exc:
            if isinstance(ctx.obj, CliOptions) and ctx.obj.settings.as_json:
                # A script reading --json gets JSON on every path, errors included.
                click.echo(_json({"ok": False, "error": str(exc), "kind": type(exc).__name__}))
            fail(str(exc), 2)


def _json(data: object, **how: Any) -> str:
    import json  # here: --help and a run without --json never pay its import

    return json.dumps(data, **how)


def fail(message: str, code: int = 2) -> NoReturn:
    click.echo(f"{PROG}: error: {message}", err=True)
    sys.exit(code)


def _param(f: Field[Any], spelled: Opt, kind: Any) -> click.Parameter:
    """The click option (or argument) of one options field, as `spelled`."""
    if spelled.argument:
        return click.Argument([f.name], nargs=-1 if kind == tuple[str, ...] else 1, type=click.Path())
    flags = spelled.flags or ("--" + f.name.replace("_", "-"),)
    how: dict[str, Any] = {"help": spelled.help, "default": None}
    if spelled.metavar is not None:
        how["metavar"] = spelled.metavar
    if kind is bool:
        how["is_flag"] = True
    elif kind is int:
        how["count"] = True
    elif kind == tuple[str, ...]:
        how["multiple"] = True
        del how["default"]
    elif kind == float | None:
        how["type"] = click.FloatRange(min=spelled.at_least)
    elif kind == int | None:
        how["type"] = click.IntRange(min=None if spelled.at_least is None else int(spelled.at_least))
    return click.Option([*flags, f.name], **how)


_FIELDS: dict[type, dict[str, tuple[Field[Any], Opt, Any]]] = {}


def _fields(kind: type) -> dict[str, tuple[Field[Any], Opt, Any]]:
    if kind not in _FIELDS:  # Settings' hints once, not once per command
        hints = typing.get_type_hints(kind)
        _FIELDS[kind] = {f.name: (f, spelling(f), hints[f.name]) for f in fields(kind)}
    return _FIELDS[kind]


def _params(entry: Command) -> list[click.Parameter]:
    """The options of `entry`'s command, in the order --help lists them: the settings its entry
    names, its own, then the common ones."""
    settings = _fields(Settings)
    chosen = [settings[name] for name in entry.settings]
    chosen += _fields(entry.options).values()
    chosen += [s for s in settings.values() if s[1].common]
    return [_param(*option) for option in chosen]


class _Command(click.Command):
    """A command whose options are made when they are first asked for (its own --help, or a run):
    `patch-speculators --help` lists each command by its help alone, and making every command's
    options took more of its time than importing click."""

    _params: list[click.Parameter]

    def __init__(self, entry: Command, **attrs: Any):
        self._entry: Command | None = entry
        super().__init__(entry.name.split()[-1], help=entry.help, **attrs)

    @property
    def params(self) -> list[click.Parameter]:
        if self._entry is not None:
            self._params, self._entry = _params(self._entry) + self._params, None
        return self._params

    @params.setter
    def params(self, value: list[click.Parameter]) -> None:
        self._params = value


OptionsT = TypeVar("OptionsT", bound=CommandOptions)


def _context(ctx: click.Context, options: dict[str, object], kind: type[OptionsT]) -> tuple[Context, OptionsT]:
    """The context and `kind` options of a command: the settings given before its name with its
    own on top (both --rules lists count). Apply's own options given before another command's
    name are the default command's, so they do not reach that command."""
    from .commands.context import Context
    from .errors import UsageError

    given = _parsed(ctx)
    own = {k: options.pop(k) for k in [f.name for f in fields(kind)] if k in options}
    settings = Settings.from_options(options, given.settings)
    # The group's own (apply's) options are the base of `apply`'s, of no other command's.
    base = given.apply if isinstance(given.apply, kind) else None
    opts = kind.from_options(own, base)
    # The error boundary reads --json from here, whichever side of the command name it was given.
    ctx.find_root().obj = replace(given, settings=settings)
    interactive = isinstance(opts, ApplyOptions) and opts.interactive
    if interactive and not sys.stdin.isatty():
        raise UsageError("--interactive needs a terminal on standard input")
    review = _review if interactive else None
    return Context(settings, log=lambda line: info(settings, line), review=review), opts


def _parsed(ctx: click.Context) -> CliOptions:
    obj = ctx.find_root().obj
    return obj if isinstance(obj, CliOptions) else CliOptions()


def emit(settings: Settings, outcome: Outcome) -> NoReturn:
    """Print `outcome` (a diff in colour on a terminal) and exit with its code."""
    if settings.as_json:
        data = outcome.data
        if outcome.exit_code == 2 and isinstance(data, dict) and not {"error", "kind"} <= data.keys():
            # The exit-2 contract (one line, and under --json `error` and `kind`) holds for every
            # command, whatever its own data says.
            last = (outcome.text.strip().splitlines() or [""])[-1]
            data = {**data, "error": data.get("error") or last, "kind": data.get("kind") or "Error"}
        click.echo(_json(data, indent=2, default=str))
    else:
        text = outcome.text
        if outcome.diff and sys.stdout.isatty():
            from .report.diff import colorize

            text = colorize(text)
        if text:
            click.echo(text, nl=not text.endswith("\n"))
        for line in outcome.notes:
            info(settings, line)
    sys.exit(outcome.exit_code)


def info(settings: Settings, text: str) -> None:
    """Progress and summaries on stderr, so stdout stays a clean diff or JSON."""
    if not settings.quiet:
        click.echo(text, err=True)


def _review(hunks: list[Hunk]) -> set[tuple[str, int, str]]:
    """Bowler's idiff: y apply, n skip, a apply this and the rest, q skip this and the rest."""
    from .report.diff import colorize, file_header

    declined: set[tuple[str, int, str]] = set()
    answer = ""
    shown = None
    for n, hunk in enumerate(hunks, 1):
        if answer in ("a", "q"):
            if answer == "q":
                declined |= hunk.keys
            continue
        if hunk.path != shown:
            click.echo(colorize(file_header(hunk.path)), nl=False, err=True)
            shown = hunk.path
        click.echo(colorize(hunk.text), nl=False, err=True)
        answer = click.prompt(f"({n}/{len(hunks)}) apply this hunk? [y,n,a,q]",
                              type=click.Choice(["y", "n", "a", "q"]), show_choices=False, err=True)
        if answer in ("n", "q"):
            declined |= hunk.keys
    return declined


def _command(entry: Command) -> click.Command:
    """The click command of one entry of the table: its options, its context, its outcome printed."""

    def run(ctx: click.Context, /, **options: object) -> None:
        c, opts = _context(ctx, options, entry.options)
        emit(c.settings, entry.load(opts)(c, opts))

    return _Command(entry, callback=click.pass_context(run))


_DEFAULT = next(entry for entry in COMMANDS if entry.name == DEFAULT)


@click.group(cls=_Group, invoke_without_command=True, context_settings={"help_option_names": ["-h", "--help"]},
             params=_params(_DEFAULT))
@click.version_option(package_name="vllm-shim-patch", prog_name=PROG)
@click.pass_context
def main(ctx: click.Context, /, **options: object) -> None:
    """Patch speculators for the installed vLLM: plan, write, verify, record.

    With no command: apply the rules for --vllm-version (or the installed vLLM).
    """
    own = {k: options.pop(k) for k in [f.name for f in fields(ApplyOptions)] if k in options}
    ctx.obj = CliOptions(Settings.from_options(options), ApplyOptions.from_options(own))
    if ctx.invoked_subcommand is None:
        ctx.invoke(main.commands[DEFAULT])


def _build() -> None:
    for name, help in GROUPS.items():
        main.add_command(click.Group(name, help=help))
    for entry in COMMANDS:
        *group, _ = entry.name.split()
        parent = main.commands[group[0]] if group else main
        assert isinstance(parent, click.Group)
        parent.add_command(_command(entry))


_build()


def script() -> NoReturn:
    """The console script and `python -m vllm_shim_patch`: `main`, then out without the
    interpreter's teardown, which frees libcst's classes and a run's syntax trees one object at
    a time (~100 ms of a ~1.8 s dry run, with nothing left to do). An embedding caller (a test's
    CliRunner) calls `main` and keeps its interpreter.

    The cycle collector is off for the run: a first dry run allocates libcst's classes and syntax
    trees, which hold next to no cycles, and the collector walked them 153 times (~50-90 ms of
    CPU, on the critical path) to free next to nothing: the peak memory of a dry run and of an
    audit is within 0.5 MB of what it was with it (44 and 39 MB)."""
    import gc

    gc.disable()
    try:
        main(prog_name=PROG)
    except SystemExit as exc:
        if exc.code is None or type(exc.code) is int:
            _exit_now(exc.code or 0)
        raise
    raise AssertionError("click's main returned")  # standalone mode always exits


def _exit_now(code: int) -> None:
    """Leave with `code` as the interpreter would, less its teardown: exit handlers run and the
    output flushed first. Returns (the caller exits the ordinary way) where that would differ: a
    thread still running (it is joined at exit), or output that cannot be flushed (Python's own
    message and status for it)."""
    import atexit
    import os
    import threading

    if threading.active_count() > 1:
        return
    try:
        sys.stdout.flush()
        sys.stderr.flush()
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:  # noqa: BLE001  (the ordinary exit says it, as it always did)
        return
    os._exit(code)

"""The `patch-speculators` command: parse options, call a command, print its outcome.

Exit codes: 0 ok; 1 a check or verification failed, or something was left undone (a file
skipped, a site left for a human); 2 usage or input error. Only click and the standard library
are imported at module level, so `--help` and `status` start fast. Nothing imports this module
but `__main__`.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import fields, replace
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

from .settings import (
    ApplyOptions,
    AuditOptions,
    CliOptions,
    CommandOptions,
    DiffOptions,
    NoOptions,
    RehearseOptions,
    RollbackOptions,
    RulesOptions,
    Settings,
    VerifyOptions,
)

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
        try:
            rv = super().main(argv, prog_name, complete_var, standalone_mode=False, **extra)
        except click.ClickException as exc:
            # click's own errors (unknown option, bad value) come before our options are parsed:
            # --json is looked for among the words themselves.
            as_json = "--json" in argv[: argv.index("--")] if "--" in argv else "--json" in argv
            where = exc.ctx.command_path if isinstance(exc, click.UsageError) and exc.ctx else PROG
            message = f"{exc.format_message()} (see {where} --help)"
            if as_json:
                click.echo(json.dumps({"ok": False, "error": message, "kind": "UsageError"}))
            fail(message, exc.exit_code)
        except click.Abort:
            # Ctrl-C (or EOF at a prompt): not a failed check, so not exit 1; 130 as a shell says it.
            if "--json" in argv:
                click.echo(json.dumps({"ok": False, "error": "interrupted", "kind": "Interrupted"}))
            click.echo(f"{PROG}: interrupted", err=True)
            sys.exit(130)
        sys.exit(rv if isinstance(rv, int) else 0)

    def invoke(self, ctx: click.Context) -> Any:
        from .errors import PatchError

        try:
            return super().invoke(ctx)
        except PatchError as exc:
            if isinstance(ctx.obj, CliOptions) and ctx.obj.settings.as_json:
                # A script reading --json gets JSON on every path, errors included.
                click.echo(json.dumps({"ok": False, "error": str(exc), "kind": type(exc).__name__}))
            fail(str(exc), 2)


def fail(message: str, code: int = 2) -> NoReturn:
    click.echo(f"{PROG}: error: {message}", err=True)
    sys.exit(code)


_COMMON = [
    click.option("--python", metavar="PATH", default=None,
                 help="interpreter (or venv folder) of the ML environment; default: this one"),
    click.option("--package", metavar="NAME", default=None, help="distribution to patch; default: speculators"),
    click.option("--rules", "rules", metavar="PATH", multiple=True,
                 help="more rule files or folders (repeatable)"),
    click.option("--skip", "skip", metavar="RULE", multiple=True, help="leave out the rule with this id (repeatable)"),
    click.option("--only", "only", metavar="RULE", multiple=True,
                 help="use only the rules with these ids (repeatable)"),
    click.option("--trust-remote-code", is_flag=True, default=None,
                 help="also run the rules that load the model's own code (its tokenizer)"),
    click.option("--state-dir", metavar="DIR", default=None,
                 help="overlay location; default: $XDG_STATE_HOME/vllm-shim-patch"),
    click.option("--vllm-source", metavar="PATH", default=None,
                 help="read vLLM signatures from this source folder or wheel"),
    click.option("--static", is_flag=True, default=None,
                 help="read signatures from vLLM's source instead of importing it"),
    click.option("--json", "as_json", is_flag=True, default=None, help="print JSON"),
    click.option("-v", "--verbose", count=True, default=None, help="say more"),
    click.option("-q", "--quiet", is_flag=True, default=None, help="print only errors and the diff"),
]

_VLLM_VERSION = click.option("--vllm-version", metavar="X", default=None,
                             help="target vLLM series, e.g. 0.16; default: the installed vLLM")
_NO_GUARD = click.option("--no-guard", is_flag=True, default=None,
                         help="ignore the installed signatures: rules apply by their since alone")
_WAIT = click.option("--wait", is_flag=True, default=None, help="wait for another running patch-speculators")

_MODEL = [
    click.option("--model", metavar="PATH", default=None,
                 help="rehearse on this model's architecture: the folder you give speculators, or its config.json"),
    click.option("--arch", metavar="NAME", default=None,
                 help="rehearse on a family's published config (llama, qwen, deepseek, ...; see rehearse --help)"),
]

_APPLY = [
    _VLLM_VERSION,
    *_MODEL,
    click.option("--dry-run", is_flag=True, default=None, help="print the diff apply would write; change nothing"),
    click.option("--check", is_flag=True, default=None, help="exit 1 if the package is not patched for this vLLM"),
    click.option("--no-verify", is_flag=True, default=None, help="skip verification (and the rehearsal) after writing"),
    click.option("--no-rehearse", is_flag=True, default=None,
                 help="skip the rehearsal of speculators' generator after verification"),
    _NO_GUARD,
    click.option("--accept-modified", is_flag=True, default=None,
                 help="with no pristine copy of files that differ from RECORD: take them as the original"),
    click.option("--wheel", metavar="PATH", default=None,
                 help="the installed release's wheel: pristine bytes for files edited by hand"),
    click.option("--no-index", is_flag=True, default=None,
                 help="do not ask the package index for the pristine wheel (the pip and uv caches still are)"),
    _WAIT,
    click.option("-i", "--interactive", is_flag=True, default=None,
                 help="review each hunk before it is written: y/n/a(ll)/q(uit)"),
]


def _options(options: list[Callable[..., Any]]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def decorate(f: Callable[..., Any]) -> Callable[..., Any]:
        for option in reversed(options):
            f = option(f)
        return f

    return decorate


common_options = _options(_COMMON)
apply_options = _options(_APPLY)


OptionsT = TypeVar("OptionsT", bound=CommandOptions)


def _context(ctx: click.Context, options: dict[str, object], kind: type[OptionsT]) -> tuple[Context, OptionsT]:
    """The context and `kind` options of a command: the settings given before its name with its
    own on top (both --rules lists count). Apply's own options given before another command's
    name are the default command's, so they do not reach that command."""
    from .commands.context import Context

    given = _parsed(ctx)
    own = {k: options.pop(k) for k in [f.name for f in fields(kind)] if k in options}
    settings = Settings.from_options(options, given.settings)
    # The group's own (apply's) options are the base of `apply`'s, of no other command's.
    base = given.apply if isinstance(given.apply, kind) else None
    opts = kind.from_options(own, base)
    # The error boundary reads --json from here, whichever side of the command name it was given.
    ctx.find_root().obj = replace(given, settings=settings)
    review = _review if isinstance(opts, ApplyOptions) and opts.interactive else None
    return Context(settings, log=lambda line: info(settings, line), review=review), opts


def _parsed(ctx: click.Context) -> CliOptions:
    obj = ctx.find_root().obj
    return obj if isinstance(obj, CliOptions) else CliOptions()


def emit(settings: Settings, outcome: Outcome, *, exit: bool = True) -> None:
    if settings.as_json:
        click.echo(json.dumps(outcome.data, indent=2, default=str))
    else:
        if outcome.text:
            click.echo(outcome.text, nl=not outcome.text.endswith("\n"))
        for line in outcome.notes:
            info(settings, line)
    if exit:
        sys.exit(outcome.exit_code)


def info(settings: Settings, text: str) -> None:
    """Progress and summaries on stderr, so stdout stays a clean diff or JSON."""
    if not settings.quiet:
        click.echo(text, err=True)


@click.group(cls=_Group, invoke_without_command=True, context_settings={"help_option_names": ["-h", "--help"]})
@apply_options
@common_options
@click.version_option(package_name="vllm-shim-patch", prog_name=PROG)
@click.pass_context
def main(ctx: click.Context, /, **options: object) -> None:
    """Patch speculators for the installed vLLM: plan, write, verify, record.

    With no command: apply the rules for --vllm-version (or the installed vLLM).
    """
    own = {k: options.pop(k) for k in [f.name for f in fields(ApplyOptions)] if k in options}
    ctx.obj = CliOptions(Settings.from_options(options), ApplyOptions.from_options(own))
    if ctx.invoked_subcommand is None:
        ctx.invoke(apply)


@main.command()
@apply_options
@common_options
@click.pass_context
def apply(ctx: click.Context, /, **options: object) -> None:
    """Write the planned edits, verify, record (the default command)."""
    from .errors import UsageError

    c, opts = _context(ctx, options, ApplyOptions)
    if opts.interactive and not sys.stdin.isatty():
        raise UsageError("--interactive needs a terminal on standard input")
    if opts.dry_run:
        _emit_diff(c, DiffOptions())
    if opts.check:
        from .commands.check import check

        emit(c.settings, check(c, opts))
    from .commands.apply import apply as run_apply

    emit(c.settings, run_apply(c, opts))


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


@main.command()
@_VLLM_VERSION
@_NO_GUARD
@click.option("--installed", is_flag=True, default=None,
              help="print the installed files' diff against their original instead")
@common_options
@click.pass_context
def diff(ctx: click.Context, /, **options: object) -> None:
    """Print the diff apply would write, rule by hunk (--installed: the patch as installed)."""
    c, opts = _context(ctx, options, DiffOptions)
    _emit_diff(c, opts)


def _emit_diff(c: Context, opts: DiffOptions) -> NoReturn:
    from .commands.diff import diff as run_diff
    from .report.diff import colorize

    outcome = run_diff(c, opts)
    if not c.settings.as_json and sys.stdout.isatty():
        outcome = replace(outcome, text=colorize(outcome.text))
    emit(c.settings, outcome, exit=False)
    sys.exit(outcome.exit_code)


@main.command()
@common_options
@click.pass_context
def status(ctx: click.Context, /, **options: object) -> None:
    """Original, patched, drifted, interrupted or not tracked."""
    from .commands.status import status as run

    c, opts = _context(ctx, options, NoOptions)
    emit(c.settings, run(c, opts), exit=False)


@main.command()
@common_options
@click.pass_context
def log(ctx: click.Context, /, **options: object) -> None:
    """Show the overlay's history, newest first."""
    from .commands.history import history

    c, opts = _context(ctx, options, NoOptions)
    emit(c.settings, history(c, opts), exit=False)


@main.command()
@click.option("--to", "to", metavar="REF", default=None, help="an earlier state (commit or tag); default: original")
@_WAIT
@common_options
@click.pass_context
def rollback(ctx: click.Context, /, **options: object) -> None:
    """Write the original bytes back, checked against RECORD."""
    from .commands.rollback import rollback as run

    c, opts = _context(ctx, options, RollbackOptions)
    emit(c.settings, run(c, opts))


@main.command()
@click.option("--all", "all_calls", is_flag=True, help="import every module and bind every call into vLLM")
@common_options
@click.pass_context
def verify(ctx: click.Context, /, **options: object) -> None:
    """Import changed modules, bind their calls into vLLM."""
    from .commands.verify import verify as run

    c, opts = _context(ctx, options, VerifyOptions)
    emit(c.settings, run(c, opts))


@main.command()
@click.option("--timeout", metavar="SECONDS", type=click.FloatRange(min=1), default=None,
              help="give up after this long (default: 900)")
@click.option("--quick", is_flag=True, default=None,
              help="short prompts only (a smoke run; no chunked prefill)")
@_options(_MODEL)
@common_options
@click.pass_context
def rehearse(ctx: click.Context, /, **options: object) -> None:
    """Run speculators' generator on CPU against the installed vLLM (exit 0 pass, 1 failure, 2 cannot run)."""
    from .commands.rehearse import rehearse as run

    c, opts = _context(ctx, options, RehearseOptions)
    emit(c.settings, run(c, opts))


@main.command()
@_VLLM_VERSION
@click.option("--emit-rules", "emit_rules", metavar="FILE", default=None,
              help="write draft rules for the mismatches no rule fixes (fill their TODOs, then rules test)")
@click.option("--no-rules", "no_rules", is_flag=True, default=None,
              help="check the package as installed only: do not plan the rules (faster)")
@common_options
@click.pass_context
def audit(ctx: click.Context, /, **options: object) -> None:
    """Check every use of vLLM (imports, calls, methods, attributes), as installed and after the rules."""
    from .commands.audit import audit as run

    c, opts = _context(ctx, options, AuditOptions)
    emit(c.settings, run(c, opts))


@main.group()
def rules() -> None:
    """List, validate and test rule files."""


@rules.command("list")
@common_options
@click.pass_context
def rules_list(ctx: click.Context, /, **options: object) -> None:
    """List the loaded rules."""
    from .commands.rules import rules_list as run

    c, opts = _context(ctx, options, RulesOptions)
    emit(c.settings, run(c, opts), exit=False)


@rules.command("check")
@click.argument("paths", nargs=-1, type=click.Path())
@common_options
@click.pass_context
def rules_check(ctx: click.Context, /, **options: object) -> None:
    """Validate rule files (default: the bundled ones and --rules)."""
    from .commands.rules import rules_check as run

    c, opts = _context(ctx, options, RulesOptions)
    emit(c.settings, run(c, opts), exit=False)


@rules.command("test")
@click.argument("paths", nargs=-1, type=click.Path())
@common_options
@click.pass_context
def rules_test(ctx: click.Context, /, **options: object) -> None:
    """Run the before/after examples embedded in rule files."""
    from .commands.rules import rules_test as run

    c, opts = _context(ctx, options, RulesOptions)
    emit(c.settings, run(c, opts))


@rules.command("docs")
@common_options
@click.pass_context
def rules_docs(ctx: click.Context, /, **options: object) -> None:
    """Print the rules as a Markdown table (the README's is this; --json: its rows)."""
    from .commands.rules import rules_docs as run

    c, opts = _context(ctx, options, RulesOptions)
    emit(c.settings, run(c, opts), exit=False)

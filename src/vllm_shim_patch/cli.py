"""The `patch-speculators` command: parse options, call the modules, render.

Exit codes: 0 ok; 1 a check or verification failed, or something was left undone (a file
skipped, a site left for a human); 2 usage or input error. Only click and the standard library
are imported at module level, so `--help` and `status` start fast.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any, NoReturn

import click

PROG = "patch-speculators"


@dataclass
class Settings:
    python: str | None = None
    package: str = "speculators"
    rules: tuple[str, ...] = ()
    as_json: bool = False
    verbose: int = 0
    quiet: bool = False
    state_dir: str | None = None
    vllm_source: str | None = None
    static: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


_COMMON = [
    click.option("--python", metavar="PATH", default=None,
                 help="interpreter (or venv folder) of the ML environment; default: this one"),
    click.option("--package", metavar="NAME", default=None, help="distribution to patch; default: speculators"),
    click.option("--rules", "rules", metavar="PATH", multiple=True,
                 help="more rule files or folders, or a bundled optional pack by name (repeatable)"),
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


def common_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """The options every command understands, before or after the command name."""
    for option in reversed(_COMMON):
        f = option(f)
    return f


def _settings(ctx: click.Context, **given: Any) -> Settings:
    settings: Settings = ctx.ensure_object(Settings)
    names = {f.name for f in fields(Settings)}
    for key, value in given.items():
        if value is None or value == () or (key == "verbose" and value == 0):
            continue
        if key == "rules":
            # Given before and after the command name, both lists count.
            settings.rules = tuple(dict.fromkeys([*settings.rules, *value]))
        elif key in names:
            setattr(settings, key, value)
        else:
            settings.extra[key] = value
    return settings


def fail(message: str, code: int = 2) -> NoReturn:
    click.echo(f"{PROG}: error: {message}", err=True)
    sys.exit(code)


def handles_errors(f: Callable[..., Any]) -> Callable[..., Any]:
    """PatchError → one line and exit 2; any other exception is a bug and keeps its traceback."""

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from .errors import PatchError

        try:
            return f(*args, **kwargs)
        except PatchError as exc:
            ctx = click.get_current_context(silent=True)
            settings = ctx.find_object(Settings) if ctx else None
            if settings is not None and settings.as_json:
                # A script reading --json gets JSON on every path, errors included.
                click.echo(json.dumps({"ok": False, "error": str(exc), "kind": type(exc).__name__}))
            fail(str(exc), 2)

    return wrapper


def emit(settings: Settings, data: Any, text: str | None = None) -> None:
    if settings.as_json:
        click.echo(json.dumps(data, indent=2, default=str))
    elif text is not None and text != "":
        click.echo(text)


def info(settings: Settings, text: str) -> None:
    """Progress and summaries on stderr, so stdout stays a clean diff or JSON."""
    if not settings.quiet:
        click.echo(text, err=True)


_APPLY = [
    click.option("--vllm-version", metavar="X", default=None,
                 help="target vLLM series, e.g. 0.16; default: the installed vLLM"),
    click.option("--dry-run", is_flag=True, default=None, help="print the diff apply would write; change nothing"),
    click.option("--check", is_flag=True, default=None, help="exit 1 if the package is not patched for this vLLM"),
    click.option("--no-verify", is_flag=True, default=None, help="skip verification after writing"),
    click.option("--no-guard", is_flag=True, default=None,
                 help="ignore the installed signatures: rules apply by their since alone"),
    click.option("--accept-modified", is_flag=True, default=None,
                 help="baseline files that differ from RECORD (already hand-edited)"),
    click.option("--wait", is_flag=True, default=None, help="wait for another running patch-speculators"),
    click.option("-i", "--interactive", is_flag=True, default=None,
                 help="review each hunk before it is written: y/n/a(ll)/q(uit)"),
]


def apply_options(f: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(_APPLY):
        f = option(f)
    return f


@click.group(invoke_without_command=True, context_settings={"help_option_names": ["-h", "--help"]})
@apply_options
@common_options
@click.version_option(package_name="vllm-shim-patch", prog_name=PROG)
@click.pass_context
def main(ctx: click.Context, **options: Any) -> None:
    """Patch speculators for the installed vLLM: plan, write, verify, record.

    With no command: apply the rules for --vllm-version (or the installed vLLM).
    """
    _settings(ctx, **options)
    if ctx.invoked_subcommand is None:
        ctx.invoke(apply)


@main.command()
@apply_options
@common_options
@click.pass_context
@handles_errors
def apply(ctx: click.Context, **options: Any) -> None:
    """Write the planned edits, verify, record (the default command)."""
    s = _settings(ctx, **options)
    opts = s.extra
    if opts.get("dry_run"):
        _diff(s, opts.get("vllm_version"))
        return
    if opts.get("check"):
        from .patching import check

        result = check(s, opts.get("vllm_version"))
        emit(s, result.data, result.text)
        sys.exit(0 if result.ok else 1)
    if opts.get("interactive") and not sys.stdin.isatty():
        fail("--interactive needs a terminal on standard input")
    from .patching import apply as run_apply

    outcome = run_apply(
        s,
        opts.get("vllm_version"),
        verify=not opts.get("no_verify"),
        accept_modified=bool(opts.get("accept_modified")),
        wait=bool(opts.get("wait")),
        log=lambda line: info(s, line),
        review=_review if opts.get("interactive") else None,
    )
    emit(s, outcome.data, outcome.text)
    sys.exit(outcome.exit_code)


def _review(hunks: list[Any]) -> set[tuple[str, int, str]]:
    """Bowler's idiff: y apply, n skip, a apply this and the rest, q skip this and the rest."""
    from .report import colorize, file_header

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
@click.option("--vllm-version", metavar="X", default=None, help="target vLLM series, e.g. 0.16")
@click.option("--no-guard", is_flag=True, default=None,
              help="ignore the installed signatures: rules apply by their since alone")
@common_options
@click.pass_context
@handles_errors
def diff(ctx: click.Context, **options: Any) -> None:
    """Print the diff apply would write, rule by hunk."""
    s = _settings(ctx, **options)
    _diff(s, s.extra.get("vllm_version"))


def _diff(s: Settings, vllm_version: str | None) -> None:
    from .patching import plan_for
    from .report import colorize, plan_json, render_diff, site_lines, summary

    plan = plan_for(s, vllm_version)
    if s.as_json:
        emit(s, plan_json(plan))
    else:
        text = render_diff(plan)
        click.echo(colorize(text) if sys.stdout.isatty() else text, nl=False)
        if plan.version_note:
            info(s, f"note: {plan.version_note}")
        for line in site_lines(plan, verbose=s.verbose > 0):
            info(s, line)
        info(s, summary(plan))
    sys.exit(0 if plan.clean else 1)


@main.command()
@common_options
@click.pass_context
@handles_errors
def status(ctx: click.Context, **options: Any) -> None:
    """Original, patched, drifted, interrupted or not tracked."""
    s = _settings(ctx, **options)
    from .status import status as get_status

    result = get_status(s)
    emit(s, result.data, result.text)


@main.command()
@common_options
@click.pass_context
@handles_errors
def log(ctx: click.Context, **options: Any) -> None:
    """Show the overlay's history, newest first."""
    s = _settings(ctx, **options)
    from .patching import history

    result = history(s)
    emit(s, result.data, result.text)


@main.command()
@click.option("--to", "to", metavar="REF", default=None, help="an earlier state (commit or tag); default: original")
@click.option("--wait", is_flag=True, default=None, help="wait for another running patch-speculators")
@common_options
@click.pass_context
@handles_errors
def rollback(ctx: click.Context, **options: Any) -> None:
    """Write the original bytes back, checked against RECORD."""
    s = _settings(ctx, **options)
    from .patching import rollback as run_rollback

    outcome = run_rollback(s, s.extra.get("to"), wait=bool(s.extra.get("wait")), log=lambda line: info(s, line))
    emit(s, outcome.data, outcome.text)
    sys.exit(outcome.exit_code)


@main.command()
@click.option("--all", "all_calls", is_flag=True, help="import every module and bind every call into vLLM")
@common_options
@click.pass_context
@handles_errors
def verify(ctx: click.Context, **options: Any) -> None:
    """Import changed modules, bind rewritten calls."""
    s = _settings(ctx, **options)
    from .preflight import verify_installed

    outcome = verify_installed(s, all_calls=bool(s.extra.get("all_calls")))
    emit(s, outcome.data, outcome.text)
    sys.exit(outcome.exit_code)


@main.command()
@click.option("--vllm-version", metavar="X", default=None, help="target vLLM series, e.g. 0.16")
@common_options
@click.pass_context
@handles_errors
def audit(ctx: click.Context, **options: Any) -> None:
    """Bind every call into vLLM, before and after the rules."""
    s = _settings(ctx, **options)
    from .preflight import audit as run_audit

    outcome = run_audit(s)
    emit(s, outcome.data, outcome.text)
    sys.exit(outcome.exit_code)


@main.group()
def rules() -> None:
    """List, validate and test rule files."""


@rules.command("list")
@common_options
@click.pass_context
@handles_errors
def rules_list(ctx: click.Context, **options: Any) -> None:
    """List the loaded rules."""
    s = _settings(ctx, **options)
    from .rules import load_pack

    pack = load_pack(s.rules)
    data = [
        {"id": r.id, "since": str(r.since), "calls": list(r.calls), "operations": list(r.operations),
         "why": r.why, "file": r.path, "line": r.line}
        for r in pack.rules
    ]
    width = max((len(r.id) for r in pack.rules), default=2)
    lines = [f"{r.id:<{width}}  since {str(r.since):<8} {', '.join(r.operations):<12} {r.calls[0]}"
             for r in pack.rules]
    emit(s, data, "\n".join(lines))


@rules.command("check")
@click.argument("paths", nargs=-1, type=click.Path())
@common_options
@click.pass_context
@handles_errors
def rules_check(ctx: click.Context, paths: tuple[str, ...], **options: Any) -> None:
    """Validate rule files (default: the bundled ones and --rules)."""
    s = _settings(ctx, **options)
    from .report_text import plural
    from .rules import load_pack

    pack = load_pack([*s.rules, *paths], bundled=not paths)
    text = f"{plural(len(pack.rules), 'rule')} OK in {plural(len(pack.sources), 'file')}"
    emit(s, {"rules": len(pack.rules), "files": list(pack.sources)}, text)


@rules.command("test")
@click.argument("paths", nargs=-1, type=click.Path())
@common_options
@click.pass_context
@handles_errors
def rules_test(ctx: click.Context, paths: tuple[str, ...], **options: Any) -> None:
    """Run the before/after examples embedded in rule files."""
    s = _settings(ctx, **options)
    from .report_text import plural
    from .rules import load_pack
    from .ruletest import cases, run_case

    pack = load_pack([*s.rules, *paths], bundled=not paths)
    results = [run_case(c) for c in cases(pack.rules)]
    bad = [r for r in results if not r.ok]
    lines = []
    for r in bad:
        lines.append(f"FAIL {r.case.id} ({r.case.rule.path}): {r.problem}")
        lines.append(r.diff().rstrip("\n"))
    if not results:
        lines.append("no examples to run")
    lines.append(f"{plural(len(results) - len(bad), 'example')} ok, {len(bad)} failing")
    emit(s, [{"case": r.case.id, "ok": r.ok, "problem": r.problem} for r in results], "\n".join(lines))
    sys.exit(1 if bad or not results else 0)


@rules.command("docs")
@common_options
@click.pass_context
@handles_errors
def rules_docs(ctx: click.Context, **options: Any) -> None:
    """Print the rules as a Markdown table (the README's is this)."""
    s = _settings(ctx, **options)
    from .ruledocs import table
    from .rules import load_pack

    click.echo(table(load_pack(s.rules).rules), nl=False)

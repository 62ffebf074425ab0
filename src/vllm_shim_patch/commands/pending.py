"""What apply would write: every file as the plan wants it, and those that differ from what is
installed (apply writes them, `diff` shows them, `--check` fails on them)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..fsutil import hash_file, record_hash

if TYPE_CHECKING:
    from ..rewrite.plan import Plan
    from .context import Context


def desired_files(plan: Plan, originals: dict[str, bytes]) -> dict[str, bytes]:
    """Every .py file as the plan wants it: the original bytes with the plan's changes on top."""
    return {**originals, **{r.path: r.after for r in plan.changed}}


def pending_writes(ctx: Context, desired: dict[str, bytes]) -> dict[str, bytes]:
    """The files of `desired` whose installed bytes differ from it."""
    root = ctx.target.location
    return {p: data for p, data in desired.items() if hash_file(root / p) != record_hash(data)}


def unrecorded_with_rules(ctx: Context) -> list[tuple[str, list[str]]]:
    """The .py files RECORD does not list that a rule would act on, each with the rules (apply
    skips them; `--check` fails on them)."""
    target = ctx.target
    extra = {}
    for path in ctx.files.unrecorded():
        try:
            extra[path] = (target.location / path).read_bytes()
        except OSError:
            continue
    if not extra:
        return []
    from ..kinds import Action

    plan = ctx.plan(extra)
    out = []
    for r in plan.results:
        acting = [s.rule_id for s in r.sites if s.action not in (Action.NOT_NEEDED, Action.ALREADY)]
        if r.changed or acting:
            out.append((r.path, list(dict.fromkeys(acting))))
    return out

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


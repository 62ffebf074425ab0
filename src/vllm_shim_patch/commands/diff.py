"""`diff` (and `apply --dry-run`): the diff apply would write, rule by hunk; exit 1 unless clean."""

from __future__ import annotations

from ..settings import NoOptions
from .context import Context, Outcome


def diff(ctx: Context, opts: NoOptions) -> Outcome:
    """The planned diff as text (the notes for stderr after it), the plan as JSON."""
    from ..report.diff import render_diff
    from ..report.plan import note_lines, plan_json, site_lines, summary

    plan = ctx.plan()
    notes = (*note_lines(plan), *site_lines(plan, verbose=ctx.settings.verbose > 0), summary(plan))
    return Outcome(render_diff(plan), plan_json(plan), 0 if plan.clean else 1, notes=notes)

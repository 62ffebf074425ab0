"""`--check`: exit 1 unless the package is in the patched state for this vLLM (Dockerfiles, CI)."""

from __future__ import annotations

from ..report import check as text
from ..settings import Action, ApplyOptions
from .apply import desired_files, pending_writes
from .context import Context, Outcome

# The sites that leave work for a human: apply cannot make the package run there.
_FOR_A_HUMAN = (Action.NEEDS_HUMAN, Action.NOTICE)


def check(ctx: Context, opts: ApplyOptions) -> Outcome:
    """Exit 1 when a file would change, or a site is left for a human (`apply --check`)."""
    from ..report.plan import problem_lines, site_line

    plan = ctx.plan()
    pending = sorted(pending_writes(ctx, desired_files(plan, ctx.originals())))
    human = [site_line(s) for s in plan.sites if s.action in _FOR_A_HUMAN] + problem_lines(plan)
    data = {"ok": not pending and plan.clean, "pending": pending, "vllm": str(plan.version),
            "rules": plan.rule_ids, "for_a_human": human}
    if pending:
        return Outcome(text.not_patched(ctx.who, str(plan.version), pending), data, 1)
    if not plan.clean:
        # Patched as far as the rules go, but a call the rules cannot fix would still fail at run time.
        left = len(plan.needs_human) + len(plan.notices) + len(plan.problems)
        return Outcome(text.for_a_human(ctx.who, str(plan.version), human, left), data, 1)
    return Outcome(text.patched(ctx.who, str(plan.version), len(plan.edited)), data, 0)

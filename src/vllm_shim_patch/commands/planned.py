"""Whether what is installed is the patch the rules plan: the body of `--check` (`check.py`),
which the patched wheel's gate asks too (`patched_wheel.build_here`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..kinds import Action
from ..report import check as text
from .context import Context, Outcome
from .pending import desired_files, pending_writes, unrecorded_with_rules

if TYPE_CHECKING:
    from ..rewrite.plan import Plan

# The sites that leave work for a human: apply cannot make the package run there.
_FOR_A_HUMAN = (Action.NEEDS_HUMAN, Action.NOTICE)


def check_plan(ctx: Context, plan: Plan | None = None) -> Outcome:
    """The plan from the original bytes against what is installed (the body of `check`). `plan`:
    one this run's apply made with the engine and recorded, taken as it is."""
    if plan is not None:
        return _verdict(ctx, plan)
    plan = ctx.plan(reuse=True)  # writes nothing: the plan cache may answer
    outcome = _verdict(ctx, plan)
    if outcome.ok and plan.cached and not _recorded(ctx, plan):
        # A cache hit is never all "patched" rests on: unless the overlay recorded these very
        # bytes as apply's (an engine run: apply never reads the cache), the engine plans again.
        outcome = _verdict(ctx, ctx.plan())
    return outcome


def _verdict(ctx: Context, plan: Plan) -> Outcome:
    from ..analysis.bytecode import beside
    from ..report.plan import problem_lines, site_line

    missing = ctx.files.missing()
    pending = sorted(set(pending_writes(ctx, desired_files(plan, ctx.files.originals()))) - set(missing))
    human = [site_line(s) for s in plan.sites if s.action in _FOR_A_HUMAN] + problem_lines(plan)
    unrecorded = unrecorded_with_rules(ctx)
    stale = [b.path for b in beside(ctx.target.location, [r.path for r in plan.changed]) if b.runs_instead]
    data = {"ok": not (pending or missing or unrecorded or stale) and plan.clean, "pending": pending,
            "vllm": str(plan.version), "rules": plan.rule_ids, "edits": len(plan.edited),
            "for_a_human": human, "missing": missing,
            "unrecorded": [p for p, _ in unrecorded], "bytecode_runs_instead": stale}
    # What makes "patched" false even where every file RECORD lists holds the patched bytes.
    shadowed = [] if ctx.target.editable else ctx.target.shadowed()
    data["imported_from_elsewhere"] = [{"package": top, "origin": origin} for top, origin in shadowed]
    if shadowed:
        data["ok"] = False
        return Outcome(text.shadowed_line(ctx.who, ctx.target.location, shadowed), data, 1)
    if missing:
        return Outcome(text.missing_line(ctx.who, plan.version, missing, ctx.target.package), data, 1)
    if unrecorded:
        return Outcome(text.unrecorded_line(ctx.who, plan.version, unrecorded, ctx.target.package), data, 1)
    if stale and not pending:
        return Outcome(text.runs_instead_line(ctx.who, plan.version, stale), data, 1)
    if pending:
        return Outcome(text.not_patched(ctx.who, str(plan.version), pending), data, 1)
    if not plan.clean:
        # Patched as far as the rules go, but a call the rules cannot fix would still fail at run time.
        left = len(plan.needs_human) + len(plan.notices) + len(plan.problems)
        return Outcome(text.for_a_human(ctx.who, str(plan.version), human, left), data, 1)
    from ..report.plan import newer_line

    newer = newer_line(str(plan.version))
    return Outcome(text.patched(ctx.who, str(plan.version), len(plan.edited)), data, 0,
                   notes=(newer,) if newer else ())


def _recorded(ctx: Context, plan: Plan) -> bool:
    """Whether the overlay's last state holds, for every file planned, the bytes the (cached) plan
    says the rules write: apply wrote and recorded them from a plan the engine made."""
    overlay = ctx.files.overlay
    head = overlay.head_commit()
    if head is None:
        return False
    recorded = overlay.tree_files(head, [r.path for r in plan.results])
    return all(recorded.get(r.path) == r.after for r in plan.results)

"""`--dry-run` / `diff`: what apply would write; `diff --installed`: the patch as installed."""

from __future__ import annotations

from .apply import desired_files, pending_writes
from .context import Context, Outcome


def dry_run(ctx: Context) -> Outcome:
    """The diff apply would write, from the original bytes, rule by hunk; when the plan's bytes are
    already installed, say so instead of showing the patch as if it were still to be written."""
    from ..report.diff import render_diff
    from ..report.plan import already_patched, plan_json, site_lines, summary

    plan = ctx.plan()
    pending = sorted(pending_writes(ctx, desired_files(plan, ctx.originals()))) if plan.changed else []
    code = 0 if plan.clean else 1
    data = {**plan_json(plan), "writes": pending}
    notes = ([f"note: {plan.version_note}"] if plan.version_note else []) + site_lines(
        plan, verbose=ctx.settings.verbose > 0)
    if plan.changed and not pending:
        return Outcome("", {**data, "already_patched": True}, code).with_log(
            *notes, already_patched(ctx.who, plan))
    return Outcome(render_diff(plan), {**data, "already_patched": False}, code).with_log(*notes, summary(plan))


def installed_diff(ctx: Context) -> Outcome:
    """The installed files against their original bytes (the overlay's `original`, else RECORD's)."""
    from ..fsutil import hash_file
    from ..report.diff import file_diff
    from ..report.text import agree, listing, plural
    from ..rewrite.results import FileResult
    from ..settings import FileStatus

    ov = ctx.overlay
    if not ov.exists() or ov.state() is None:
        # Never recorded: the files are all there is, so RECORD is what they can be compared with.
        t = ctx.target
        listed = {e.path: e.hash for e in t.record}
        differ = [p for p in t.python_files() if hash_file(t.location / p) != listed.get(p)]
        n = len(differ)
        line = (f"{ctx.who} is not tracked and {plural(n, 'file')} {agree(n, 'differs', 'differ')} from RECORD "
                f"({listing(differ)}): the tool never recorded the original bytes, so there is no diff to show"
                if differ else f"{ctx.who} as installed is its original (RECORD-exact): nothing to show")
        return Outcome("", {"package": ctx.who, "files": [], "differ_from_record": differ}, 0).with_log(line)
    originals, installed = ctx.originals(), ctx.installed()
    changed = [FileResult(p, FileStatus.CHANGED, originals.get(p, b""), installed.get(p, b""))
               for p in sorted(set(originals) | set(installed)) if originals.get(p) != installed.get(p)]
    text = "".join(file_diff(r) for r in changed)
    line = (f"{ctx.who} as installed: {plural(len(changed), 'file')} differ from the original"
            if changed else f"{ctx.who} as installed is its original: nothing to show")
    return Outcome(text, {"package": ctx.who, "files": [{"path": r.path, "diff": file_diff(r)} for r in changed]},
                   0).with_log(line)

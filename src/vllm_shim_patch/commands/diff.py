"""`diff` (and `apply --dry-run`): the diff apply would write, rule by hunk; exit 1 unless clean.
`diff --installed`: the patch as installed, against the original bytes."""

from __future__ import annotations

from ..settings import DiffOptions
from .apply import desired_files, pending_writes
from .context import Context, Outcome


def diff(ctx: Context, opts: DiffOptions) -> Outcome:
    """The planned diff as text (the notes for stderr after it), the plan as JSON; when the plan's
    bytes are already installed, say so instead of showing the patch as if it were still to be written."""
    if opts.installed:
        return _installed(ctx)
    from ..report.diff import render_diff
    from ..report.plan import already_patched, note_lines, plan_json, site_lines, summary

    plan = ctx.plan()
    pending = sorted(pending_writes(ctx, desired_files(plan, ctx.originals()))) if plan.changed else []
    code = 0 if plan.clean else 1
    data = {**plan_json(plan), "writes": pending}
    notes = (*note_lines(plan), *site_lines(plan, verbose=ctx.settings.verbose > 0))
    if plan.changed and not pending:
        return Outcome("", {**data, "already_patched": True}, code,
                       notes=(*notes, already_patched(ctx.who, plan)))
    return Outcome(render_diff(plan), {**data, "already_patched": False}, code, notes=(*notes, summary(plan)))


def _installed(ctx: Context) -> Outcome:
    """The installed files against their original bytes (the overlay's `original`, else RECORD's)."""
    from ..fsutil import hash_file
    from ..report.diff import file_diff, installed_summary, untracked_installed
    from ..rewrite.results import FileResult
    from ..settings import FileStatus

    ov = ctx.overlay
    if not ov.exists() or ov.state() is None:
        # Never recorded: the files are all there is, so RECORD is what they can be compared with.
        t = ctx.target
        listed = {e.path: e.hash for e in t.record}
        differ = [p for p in t.python_files() if hash_file(t.location / p) != listed.get(p)]
        return Outcome("", {"package": ctx.who, "files": [], "differ_from_record": differ}, 0,
                       notes=(untracked_installed(ctx.who, differ),))
    originals, installed = ctx.originals(), ctx.installed()
    changed = [FileResult(p, FileStatus.CHANGED, originals.get(p, b""), installed.get(p, b""))
               for p in sorted(set(originals) | set(installed)) if originals.get(p) != installed.get(p)]
    return Outcome("".join(file_diff(r) for r in changed),
                   {"package": ctx.who, "files": [{"path": r.path, "diff": file_diff(r)} for r in changed]}, 0,
                   notes=(installed_summary(ctx.who, len(changed)),))

"""`diff` (and `apply --dry-run`): the diff apply would write, rule by hunk; exit 1 unless clean.
`diff --installed`: the patch as installed, against the original bytes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..options import DiffOptions
from ..settings import ApplyOptions
from .context import Context, Outcome
from .pending import desired_files, pending_writes

if TYPE_CHECKING:
    from ..rewrite.results import FileResult


def dry_run(ctx: Context, opts: ApplyOptions) -> Outcome:
    """`apply --dry-run`: the diff, as `diff` with its defaults; apply's other options change nothing."""
    return diff(ctx, DiffOptions())


def diff(ctx: Context, opts: DiffOptions) -> Outcome:
    """The planned diff as text (the notes for stderr after it), the plan as JSON; when the plan's
    bytes are already installed, say so instead of showing the patch as if it were still to be written."""
    if opts.installed:
        return _installed(ctx)
    from ..report.diff import render_diff
    from ..report.plan import already_patched, note_lines, plan_json, site_lines, summary

    plan = ctx.plan(reuse=True)  # writes nothing: the plan cache may answer (any state dir)
    pending = sorted(pending_writes(ctx, desired_files(plan, ctx.files.originals()))) if plan.changed else []
    code = 0 if plan.clean else 1
    data = {**plan_json(plan), "writes": pending}
    notes = (*note_lines(plan), *site_lines(plan, verbose=ctx.settings.verbose > 0))
    if plan.changed and not pending:
        return Outcome("", {**data, "already_patched": True}, code,
                       notes=(*notes, already_patched(ctx.who, plan)), diff=True)
    from ..fleet.installed import find

    wheel = find(ctx.target)
    if wheel is not None:
        # Installed from a patched wheel: the plan is made from the originals the wheel keeps, but
        # what is on disk is the wheel's patch; a diff from the originals would not apply to it.
        from ..report.wheel import diff_on_wheel

        installed = ctx.files.installed()
        desired = desired_files(plan, ctx.files.originals())
        text = _against(installed, {p: desired[p] for p in pending})
        return Outcome(text, {**data, "already_patched": False, "against": "installed"}, code,
                       notes=(*notes, summary(plan), diff_on_wheel(ctx.who, wheel, pending)), diff=True)
    return Outcome(render_diff(plan), {**data, "already_patched": False}, code, notes=(*notes, summary(plan)),
                   diff=True)


def _against(installed: dict[str, bytes], desired: dict[str, bytes]) -> str:
    """The diff from what is installed to `desired`, file by file (no rules on its hunks: they
    record no plan of these bytes)."""
    from ..kinds import FileStatus
    from ..report.diff import file_diff
    from ..rewrite.results import FileResult

    return "".join(file_diff(FileResult(p, FileStatus.CHANGED, installed.get(p, b""), data))
                   for p, data in sorted(desired.items()))


def _installed(ctx: Context) -> Outcome:
    """The installed files against their original bytes (the overlay's `original`, else RECORD's)."""
    from ..fleet.installed import find
    from ..fsutil import hash_file
    from ..kinds import FileStatus
    from ..report.diff import file_diff, installed_summary, untracked_installed
    from ..rewrite.results import FileResult

    ov = ctx.files.overlay
    # An install from a patched wheel keeps its originals: the patch is shown against them.
    if (not ov.exists() or ov.state() is None) and find(ctx.target) is None:
        # Never recorded: the files are all there is, so RECORD is what they can be compared with.
        t = ctx.target
        listed = {e.path: e.hash for e in t.record}
        differ = [p for p in t.python_files() if hash_file(t.location / p) != listed.get(p)]
        return Outcome("", {"package": ctx.who, "files": [], "differ_from_record": differ}, 0,
                       notes=(untracked_installed(ctx.who, differ),), diff=True)
    originals, installed = ctx.files.originals(), ctx.files.installed()
    changed = [FileResult(p, FileStatus.CHANGED, originals.get(p, b""), installed.get(p, b""))
               for p in sorted(set(originals) | set(installed)) if originals.get(p) != installed.get(p)]
    local = _local_edits(ctx, originals)
    if not local:
        return Outcome("".join(file_diff(r) for r in changed),
                       {"package": ctx.who, "files": [{"path": r.path, "diff": file_diff(r)} for r in changed]}, 0,
                       notes=(installed_summary(ctx.who, len(changed)),), diff=True)
    from ..report.diff import local_header, rules_header

    # The rules' hunks name their rules when the plan from the hand-edited bytes is what is installed.
    planned = _planned(ctx) if changed else {}
    ours = [planned[r.path] if r.path in planned and planned[r.path].after == r.after else r for r in changed]
    text = local_header() + "".join(file_diff(r) for r in local)
    if ours:
        text += rules_header() + "".join(file_diff(r) for r in ours)
    files = ([{"path": r.path, "diff": file_diff(r), "by": "local"} for r in local]
             + [{"path": r.path, "diff": file_diff(r), "by": "rules"} for r in ours])
    return Outcome(text, {"package": ctx.who, "files": files}, 0,
                   notes=(installed_summary(ctx.who, len(ours), len(local)),), diff=True)


def _planned(ctx: Context) -> dict[str, FileResult]:
    """The plan's changed files, for the rule names; none when it cannot be made (no vLLM version)."""
    from ..errors import PatchError

    try:
        return {r.path: r for r in ctx.plan(reuse=True).changed}
    except PatchError:
        return {}


def _local_edits(ctx: Context, originals: dict[str, bytes]) -> list[FileResult]:
    """The user's hand edits (`local`) that the installed files carry: pristine original -> local."""
    from ..rewrite.results import FileResult
    from ..kinds import FileStatus

    ov = ctx.files.overlay
    state = ov.state()
    if state is None or not state.data.get("local_commit"):
        return []
    paths = list(state.data["local_files"])
    pristine = ov.tree_files(ov.resolve("original"), paths)
    local = ov.tree_files(state.data["local_commit"], paths)
    return [FileResult(p, FileStatus.CHANGED, pristine.get(p) or b"", local.get(p) or b"")
            for p in paths if originals.get(p) == local.get(p) and local.get(p) != pristine.get(p)]

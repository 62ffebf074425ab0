"""`rollback [--to REF]`: write the original (or an earlier state) back, checked against RECORD."""

from __future__ import annotations

from typing import Any

from ..errors import OverlayError, UsageError
from ..fsutil import hash_file, record_hash
from ..report import apply as text
from ..words import listing
from ..options import RollbackOptions
from . import preflight
from .context import Context, Outcome


def rollback(ctx: Context, opts: RollbackOptions) -> Outcome:
    """Write the original (or `opts.to`) back under the lock, checked against RECORD."""
    from ..fleet.installed import find
    from ..overlay.baseline import check_original, record_mismatches
    from ..overlay.recovery import recover, settled_on_failure

    if opts.to is not None and not opts.to.strip():
        # `--to "$REF"` with the variable unset: never the original by default.
        raise UsageError("--to is empty: give a state (a commit or tag: see `patch-speculators log`), or leave "
                         "out --to to roll back to the original; nothing was changed")
    wheel = find(ctx.target)
    if wheel is not None:
        from .installed import rollback as wheel_rollback

        return wheel_rollback(ctx, opts, wheel)
    to = opts.to
    preflight.refuse_editable(ctx.target)
    ov, target = ctx.files.overlay, ctx.target
    files = ctx.files.tracked
    if not ov.exists():
        return _untracked(ctx, to)
    preflight.check_mounted_writable(ctx.target)
    label = to or "original"
    with ov.locked(opts.wait), settled_on_failure(ov, target, files, ctx.log):
        recover(ov, target, files, ctx.log)
        _settle_baseline(ctx)
        to_commit = _resolve_same_install(ctx, label)
        wanted = ov.tree_files(to_commit, files)
        if to is None:
            check_original(ov, target, to_commit, wanted)
        writes = {p: d for p, d in wanted.items()
                  if d is not None and hash_file(target.location / p) != record_hash(d)}
        _write(ctx, writes, label, to_commit)
    data: dict[str, Any] = {"changed": bool(writes), "to": label, "commit": to_commit, "files": sorted(writes)}
    if to is None:
        bad = record_mismatches(target, files)
        data["record_mismatch"] = bad
        checked = len({e.path for e in target.record if e.hash and e.path in files})
        if bad:
            return Outcome(text.rolled_back_off_record(ctx.who, bad), data, 1)
        tail = text.rollback_tail(checked, to_commit)
    else:
        tail = text.rollback_tail(None, to_commit)
    return Outcome(text.rolled_back(ctx.who, label, len(writes), tail), data, 0)


def _untracked(ctx: Context, to: str | None) -> Outcome:
    from ..overlay.baseline import record_mismatches

    if to is not None:
        raise OverlayError(f"no state {to!r}: {ctx.who} is not tracked (this tool never recorded it), "
                           f"so there is nothing to roll back to")
    bad = record_mismatches(ctx.target, ctx.files.tracked)
    if bad:
        return Outcome(text.untracked_off_record(ctx.who, bad), {"changed": False, "record_mismatch": bad}, 1)
    return Outcome(text.untracked_clean(ctx.who), {"changed": False}, 0)


def _settle_baseline(ctx: Context) -> None:
    """Before writing: a reinstall becomes the new original; edits made outside the tool are saved."""
    from ..overlay.baseline import (
        another_release,
        commit_message,
        fresh_state,
        prepare,
        record_mismatches,
        refuse_foreign_edits,
        refuse_links,
    )

    ov, target, files = ctx.files.overlay, ctx.target, ctx.files.tracked
    refuse_links(target, files)
    state = fresh_state(ov, target, files)
    recorded = another_release(state, target)
    if recorded is not None:
        # Another release was installed under us: as pip wrote it, it is its own original; edited,
        # there is no original of it to restore, and never another release's.
        mismatched = record_mismatches(target, files)
        if mismatched:
            refuse_foreign_edits(target, recorded, mismatched, rollback=True)
        prepare(ov, target, accept_modified=False, log=ctx.log)
        return
    if state.files != files:
        # The same release with another file list: edits are grafted onto its own original.
        prepare(ov, target, accept_modified=True, log=ctx.log)
        return
    edited = [p for p in files if hash_file(target.location / p) != state.head.get(p)]
    if edited and not record_mismatches(target, files):
        # Every file is what pip wrote: a reinstall, which is the new original.
        prepare(ov, target, accept_modified=False, log=ctx.log)
    elif edited:
        # Edits made outside the tool are about to be overwritten: keep them in the history.
        saved = ov.commit(files, commit_message("drift", f"edits made outside this tool to {ctx.who}",
                                                [f"Files: {listing(edited)}"], {"Package": ctx.who}))
        ctx.log(text.saved_drift(len(edited), saved))


def _resolve_same_install(ctx: Context, label: str) -> str:
    """The commit of `label`, refused when it is a state of another installed version."""
    from ..overlay.baseline import package_of, read_trailers

    commit = ctx.files.overlay.resolve(label)
    recorded = package_of(read_trailers(ctx.files.overlay, commit))
    if recorded and recorded != (ctx.target.package, ctx.target.version):
        raise OverlayError(
            f"{label} is a state of {' '.join(recorded)}, but {ctx.who} is installed: roll back "
            f"within the installed version, or reinstall {' '.join(recorded)} first"
        )
    return commit


def _write(ctx: Context, writes: dict[str, bytes], label: str, to_commit: str) -> None:
    from ..overlay.baseline import commit_message, sync_state

    if not writes:
        return
    ov = ctx.files.overlay
    preflight.check_writable(ctx.target, sorted(writes))
    head = ov.head_commit()
    assert head is not None
    message = commit_message("rollback", f"rollback {ctx.who} to {label} ({to_commit[:12]})",
                             [f"Files: {', '.join(sorted(writes))}"], {"Package": ctx.who, "To": to_commit})
    ov.write_files("rollback", writes, head, to_commit=to_commit, message=message, package=ctx.who)
    ov.commit(ctx.files.tracked, message)
    sync_state(ov, ctx.target, ctx.files.tracked)
    ov.clear_journal()

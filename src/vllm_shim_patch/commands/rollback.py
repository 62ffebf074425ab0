"""`rollback [--to REF]`: write the original (or an earlier state) back, checked against RECORD."""

from __future__ import annotations

from typing import Any

from ..errors import OverlayError, UsageError
from ..report import apply as text
from ..options import RollbackOptions
from . import preflight
from .context import Context, Outcome


def rollback(ctx: Context, opts: RollbackOptions) -> Outcome:
    """Write the original (or `opts.to`) back in one overlay transaction, checked against RECORD."""
    from ..fleet.installed import find
    from ..overlay.baseline import record_mismatches
    from ..overlay.transaction import Transaction

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
    with Transaction.begin(ov, target, files, ctx.log, opts.wait) as txn:
        saved = txn.settle_for_rollback()
        if saved is not None:
            ctx.log(text.saved_drift(*saved))
        to_commit = txn.resolve(label)
        writes = txn.changes_to(to_commit, original=to is None)
        if writes:
            preflight.check_writable(ctx.target, sorted(writes))
            message = txn.message("rollback", f"rollback {ctx.who} to {label} ({to_commit[:12]})",
                                  [f"Files: {', '.join(sorted(writes))}"], {"Package": ctx.who, "To": to_commit})
            txn.write("rollback", writes, to_commit=to_commit, message=message)
            txn.commit(message)
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

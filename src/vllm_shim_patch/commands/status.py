"""`status`: original, patched, drifted, interrupted or not tracked — without git or libcst.

Reads the overlay's state.json and hashes the installed files; only a probe of the target
interpreter runs, so it answers in well under a second.
"""

from __future__ import annotations

from typing import Any

from ..fsutil import hash_file
from ..overlay import layout, lock
from ..overlay.integrity import check_overlay
from ..report import status as text
from ..kinds import PackageState
from ..settings import NoOptions
from .context import Context, Outcome


def status(ctx: Context, opts: NoOptions) -> Outcome:
    """The state of the context's target (a probe of the interpreter, nothing else)."""
    target = ctx.target
    who = f"{target.package} {target.version}"
    files = layout.tracked_paths(e.path for e in target.record)
    current = {p: hash_file(target.location / p) for p in files}
    record = {e.path: e.hash for e in target.record if e.hash}
    off_record = sorted(p for p in files if p in record and current[p] != record[p])
    path = layout.overlay_for(ctx.settings.state_dir, target.package, target.location)
    base: dict[str, Any] = {"package": target.package, "version": target.version,
                            "location": str(target.location), "overlay": str(path),
                            "vllm_installed": target.vllm_version, "differs_from_record": off_record}
    from ..fleet.installed import find

    wheel = find(target)
    if wheel is not None:
        from .installed import status as wheel_status

        return wheel_status(ctx, wheel, base)
    check_overlay(path, target.package, target.version, target.location)
    journal = layout.read_journal(path)
    holder = lock.holder(path / layout.LOCK_FILE)
    if holder is not None:
        op = journal.get("op", "run") if journal else "run"
        return _outcome(PackageState.BUSY, text.busy(who, holder, op), base, pid=holder)
    if journal:
        return _outcome(PackageState.INTERRUPTED, text.interrupted(who, journal.get("op"), journal.get("pid")),
                        base, journal=journal)
    recorded = layout.read_state(path)
    state = recorded.data if recorded else None
    if not state:
        return _outcome(PackageState.NOT_TRACKED, text.not_tracked(who, off_record), base)
    head = state["head"]
    trailers = state.get("trailers", {})
    kind = trailers.get("kind", "baseline")
    same_install = state.get("version") == target.version and state["files"] == files
    differs = sorted(p for p in files if current[p] != head.get(p)) if same_install else files
    local = state.get("local_files") if state.get("local_commit") else None
    if local:
        base["local"] = {"commit": state["local_commit"], "files": local}
    if not differs:
        if kind == "patch":
            rules = trailers.get("rules", "")
            names = rules.split(",") if rules else []
            skipped = [n for n in trailers.get("skipped", "").split(",") if n]
            options = [n for n in trailers.get("options", "").split(",") if n]
            gap = text.unrehearsed(trailers)
            line = text.patched(who, trailers.get("vllm", "?"), trailers.get("guard", "unguarded"),
                                str(state.get("when", "?")), names, skipped, options, gap) + text.on_local(local)
            return _outcome(PackageState.PATCHED, line, base, rules=names, vllm=trailers.get("vllm"),
                            guard=trailers.get("guard"), when=state.get("when"), verify=trailers.get("verify"),
                            skipped=skipped, options=options, rehearsed=gap is None, not_rehearsed=gap)
        if kind == "local":
            return _outcome(PackageState.LOCAL, text.local(who, local or []), base)
        return _outcome(PackageState.ORIGINAL, text.original(who), base)
    line = text.drifted(target.package, state.get("version"), target.version, differs if same_install else None,
                        bool(off_record))
    return _outcome(PackageState.DRIFTED, line, base, files=differs)


def _outcome(state: PackageState, line: str, base: dict[str, Any], **more: Any) -> Outcome:
    return Outcome(line, {**base, "state": state.value, **more})

"""`status`: original, patched, drifted, interrupted or not tracked — without git or libcst.

Reads the overlay's state.json and hashes the installed files; only a probe of the target
interpreter runs, so it answers in well under a second.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..fsutil import hash_file
from ..overlay import layout, lock
from ..overlay.integrity import check_overlay
from ..report.text import plural
from ..settings import PackageState, Settings

if TYPE_CHECKING:
    from ..target import Target


@dataclass
class StatusResult:
    state: PackageState
    text: str
    data: dict[str, Any] = field(default_factory=dict)


def status(settings: Settings, target: Target) -> StatusResult:
    """The state of `target` (the context's target: a probe of the interpreter, nothing else)."""
    who = f"{target.package} {target.version}"
    files = layout.tracked_paths(e.path for e in target.record)
    current = {p: hash_file(target.location / p) for p in files}
    record = {e.path: e.hash for e in target.record if e.hash}
    off_record = sorted(p for p in files if p in record and current[p] != record[p])
    path = layout.overlay_for(settings.state_dir, target.package, target.location)
    base: dict[str, Any] = {"package": target.package, "version": target.version,
                            "location": str(target.location), "overlay": str(path),
                            "vllm_installed": target.vllm_version, "differs_from_record": off_record}
    check_overlay(path, target.package, target.version, target.location)
    journal = layout.read_journal(path)
    holder = lock.holder(path / layout.LOCK_FILE)
    if holder is not None:
        op = journal.get("op", "run") if journal else "run"
        text = f"busy: another patch-speculators (pid {holder}) is working on {who} right now ({op})"
        return StatusResult(PackageState.BUSY, text, {**base, "state": "busy", "pid": holder})
    if journal:
        text = (f"interrupted: a {journal.get('op')} of {who} (pid {journal.get('pid')}) was cut short; "
                f"the next apply or rollback finishes or undoes it")
        return StatusResult(PackageState.INTERRUPTED, text, {**base, "state": "interrupted", "journal": journal})
    recorded = layout.read_state(path)
    state = recorded.data if recorded else None
    if not state:
        extra = (f"; {len(off_record)} files differ from RECORD: {', '.join(off_record[:5])}" if off_record
                 else "; files match RECORD")
        return StatusResult(PackageState.NOT_TRACKED, f"not tracked: {who} was never patched by this tool{extra}",
                            {**base, "state": "not tracked"})
    head = state["head"]
    trailers = state.get("trailers", {})
    kind = trailers.get("kind", "baseline")
    same_install = state.get("version") == target.version and state["files"] == files
    differs = sorted(p for p in files if current[p] != head.get(p)) if same_install else files
    if not differs:
        if kind == "patch":
            rules = trailers.get("rules", "")
            guard = trailers.get("guard", "unguarded")
            guard = "unguarded" if guard == "unguarded" else f"guarded by {guard} signatures"
            when = str(state.get("when", "?"))[:19].replace("T", " ")
            text = (f"patched: {who} for vLLM {trailers.get('vllm', '?')}, {guard}, at {when}; "
                    f"rules: {', '.join(rules.split(',')) if rules else '(none)'}")
            return StatusResult(PackageState.PATCHED, text, {**base, "state": "patched", "rules": rules.split(",") if rules else [],
                                                  "vllm": trailers.get("vllm"), "guard": trailers.get("guard"),
                                                  "when": state.get("when"), "verify": trailers.get("verify")})
        return StatusResult(PackageState.ORIGINAL, f"original: {who} as installed", {**base, "state": "original"})
    if not same_install:
        why = (f"{target.package} {state.get('version')} was tracked, {target.version} is installed now"
               if state.get("version") != target.version else "the installed file list changed (reinstalled)")
    else:
        why = f"{plural(len(differs), 'file')} changed since the last recorded state: {', '.join(differs[:5])}"
        if not off_record:
            why += " (all files match RECORD: reinstalled, e.g. pip install --force-reinstall)"
        else:
            why += " (edited by hand? they differ from RECORD)"
    text = f"drifted: {why}; apply records a reinstall as the new original, rollback restores the original"
    return StatusResult(PackageState.DRIFTED, text, {**base, "state": "drifted", "files": differs})

"""`status` as text: one line per state, from the facts the command gathered."""

from __future__ import annotations

from collections.abc import Mapping

from ..words import plural


def busy(who: str, pid: str, op: str) -> str:
    return f"busy: another patch-speculators (pid {pid}) is working on {who} right now ({op})"


def interrupted(who: str, op: object, pid: object) -> str:
    return (f"interrupted: a {op} of {who} (pid {pid}) was cut short; "
            f"the next apply or rollback finishes or undoes it")


def not_tracked(who: str, off_record: list[str]) -> str:
    extra = (f"; {len(off_record)} files differ from RECORD: {', '.join(off_record[:5])}" if off_record
             else "; files match RECORD")
    return f"not tracked: {who} was never patched by this tool{extra}"


def unrehearsed(trailers: Mapping[str, str]) -> str | None:
    """Why the patch an overlay commit records has no passing rehearsal (None: it passed).

    The commit's `Vsp-Rehearsal` trailer says `passed`, another outcome (`timeout`...),
    `could not run (why)` or `not run (why)`; a commit from before that trailer says it in its
    verification verdict."""
    raw = trailers.get("rehearsal")
    if raw is None:
        return None if "rehearsal passed" in trailers.get("verify", "") else "no rehearsal on record"
    if raw == "passed":
        return None
    for prefix in ("could not run (", "not run ("):
        if raw.startswith(prefix) and raw.endswith(")"):
            return raw[len(prefix):-1]
    if raw == "not run":
        return raw
    # Another outcome (cannot_rehearse, timeout...): the verdict's rehearsal part says it in words.
    verdict = trailers.get("verify", "")
    at = verdict.find("rehearsal ")
    if at < 0:
        return f"rehearsal {raw}"
    words = verdict[at:]
    return words.removeprefix("rehearsal could not run: ").removeprefix("rehearsal ")


def patched(who: str, vllm: str, guard: str, when: str, rules: list[str], skipped: list[str] | None = None,
            options: list[str] | None = None, not_rehearsed: str | None = None) -> str:
    guarded = "unguarded" if guard == "unguarded" else f"guarded by {guard} signatures"
    left_out = f"; skipped: {', '.join(skipped)}" if skipped else ""
    opted = f"; with {', '.join('--' + o for o in options)}" if options else ""
    state = "patched" if not_rehearsed is None else f"patched (not rehearsed: {not_rehearsed})"
    return (f"{state}: {who} for vLLM {vllm}, {guarded}, at {when[:19].replace('T', ' ')}; "
            f"rules: {', '.join(rules) if rules else '(none)'}{left_out}{opted}")


def on_local(files: list[str] | None) -> str:
    """After `patched: ...`: the hand edits the rules were applied on top of."""
    return f"; on top of hand edits not by this tool (local): {', '.join(files[:5])}" if files else ""


def local(who: str, files: list[str]) -> str:
    return (f"local: {who} with its hand edits not by this tool ({', '.join(files[:5])}), no rule applied; "
            f"apply patches on top of them, rollback restores the pristine original")


def original(who: str) -> str:
    return f"original: {who} as installed"


def drifted(package: str, tracked: object, installed: str, differs: list[str] | None, off_record: bool) -> str:
    """`differs` None: another install than the one tracked (`tracked` its version)."""
    if differs is None:
        why = (f"{package} {tracked} was tracked, {installed} is installed now" if tracked != installed
               else "the installed file list changed (reinstalled)")
    else:
        why = f"{plural(len(differs), 'file')} changed since the last recorded state: {', '.join(differs[:5])}"
        if not off_record:
            why += " (all files match RECORD: reinstalled, e.g. pip install --force-reinstall)"
        else:
            why += " (edited by hand? they differ from RECORD)"
    return f"drifted: {why}; apply records a reinstall as the new original, rollback restores the original"

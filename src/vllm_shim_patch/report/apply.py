"""`apply`, `verify`, `rehearse` and `log` as text: the one line each ends with."""

from __future__ import annotations

from ..words import agree, listing, plural


def failed_closed(path: str, reason: str) -> str:
    return f"nothing written: {path}: {reason}"


def patched(who: str, version: object, summary: str, verdict: str) -> str:
    return f"patched {who} for vLLM {version}: {summary}; verification {verdict}"


def declined(n: int) -> str:
    return f"nothing written: {plural(n, 'change')} declined in review"


def review_again(hunks: int) -> str:
    """Before a second round of `-i`: what the declines changed."""
    return f"the declined hunks make other edits needed: {plural(hunks, 'more hunk')} to review"


def already(who: str, version: object, summary: str) -> str:
    return f"{who} is already patched for vLLM {version}: nothing to do ({summary})"


def verification_failed(reason: str, restored: int) -> str:
    return f"verification failed: {reason}; restored {plural(restored, 'file')}, nothing recorded"


def verdict(summary: str, rehearsal: str | None, why_not: str | None) -> str:
    """The verification verdict recorded with the commit: the rehearsal's headline, or why it did not run."""
    return f"{summary}; rehearsal not run ({why_not})" if rehearsal is None else f"{summary}; {rehearsal}"


def could_not_rehearse(why: str) -> str:
    """The verdict's rehearsal part when the target has vLLM but the rehearsal refused to run."""
    return f"rehearsal could not run: {why}"


NO_VERIFY = "skipped (--no-verify)"


def nothing_to_verify(who: str) -> str:
    return f"{who} is not patched: nothing to verify (verify --all checks every call into vLLM)"


def verified(lines: list[str], who: str, ok: bool, summary: str, reason: str) -> str:
    return "\n".join([*lines, f"verify {who}: {summary if ok else f'FAILED: {reason}'}"])


def rehearsed(lines: list[str], who: str, vllm: str | None, headline: str) -> str:
    return "\n".join([*lines, f"{who} on vLLM {vllm}: {headline}"])


def untracked_history(who: str) -> str:
    return f"{who} is not tracked: no history"


def history_line(sha: str, when: str, subject: str, tags: list[str]) -> str:
    return f"{sha[:12]} {when[:19].replace('T', ' ')} {subject}" + (f" [{', '.join(tags)}]" if tags else "")


def rolled_back(who: str, label: str, restored: int, tail: str) -> str:
    if not restored:
        return f"{who} is already at {label}: nothing to do ({tail})"
    return f"rolled back {who} to {label}: restored {plural(restored, 'file')}; {tail}"


def rollback_tail(checked: int | None, commit: str) -> str:
    """`checked`: the files compared with RECORD (a rollback to the original), else at `commit`."""
    return f"sha256 equal to RECORD for all {checked} files" if checked is not None else f"now at {commit[:12]}"


def rolled_back_off_record(who: str, bad: list[str]) -> str:
    return (f"rolled back {who} to the overlay's original, but {plural(len(bad), 'file')} "
            f"{agree(len(bad), 'differs', 'differ')} from RECORD "
            f"(that original was accepted as modified): {listing(bad)}")


def untracked_off_record(who: str, bad: list[str]) -> str:
    return (f"{who} is not tracked by this tool, and {plural(len(bad), 'file')} "
            f"{agree(len(bad), 'differs', 'differ')} from RECORD: {listing(bad)}; reinstall it with pip")


def untracked_clean(who: str) -> str:
    return f"{who} is not tracked: it was never patched here and matches its RECORD; nothing to do"


def saved_drift(n: int, commit: str) -> str:
    return f"saved {plural(n, 'file')} changed outside this tool as overlay commit {commit[:12]}"

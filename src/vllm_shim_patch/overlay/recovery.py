"""After a killed run: finish or undo what its journal says, never touching a file changed since."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

from ..errors import (
    DamagedOverlayError,
    GitMissingError,
    LockedError,
    OverlayError,
    StateDirError,
    UnsafeWriteError,
    UntrustedOverlayError,
)
from ..words import listing
from .baseline import read_trailers, sync_state
from .integrity import recovery as recovery_hint

if TYPE_CHECKING:
    from ..settings import Log
    from ..target import Target
    from .repo import Overlay


def retag(ov: Overlay) -> None:
    """A run killed between a commit and its tag: point `original`/`patched` at HEAD as meant."""
    head = ov.head_commit()
    if head is None:
        return
    kind = read_trailers(ov, head).get("kind")
    tag = {"baseline": "original", "patch": "patched", "local": "local"}.get(kind or "")
    if tag and ov.tag_points_at(tag) != head:
        ov.git("tag", "-f", tag, head)


def recover(ov: Overlay, target: Target, files: list[str], log: Log) -> None:
    """Finish or undo what a killed apply or rollback left; say so. Never touch a file changed since."""
    if not ov.exists():
        return
    journal = ov.journal()
    ov.reset_index()
    retag(ov)
    if journal is None:
        return
    head = ov.head_commit()
    paths = sorted(journal["files"])
    pid = journal.get("pid", "?")
    who = f"{target.package} {target.version}"
    if journal.get("package", who) != who:
        log(f"an interrupted {journal['op']} of {journal.get('package')} (pid {pid}) was found, but {who} is "
            f"installed now: its files were left as they are")
        ov.clear_journal()
        sync_state(ov, target, files)
        return
    foreign = [p for p in paths if p not in set(files)]
    if foreign:
        # A journal is ours only if it names the package's own files: `evil.pth` is planted.
        raise DamagedOverlayError(
            f"{ov.journal_file} is damaged (it names {listing(foreign)}, which {who}'s RECORD does not list), "
            f"so nothing was written; {recovery_hint(ov.path, target.package, target.version)}")
    expect = {p: {v.get("before"), v.get("after")} for p, v in journal["files"].items()}
    if journal["op"] == "apply":
        if head != journal["base_commit"]:
            log(f"finished an interrupted apply (pid {pid}): its commit was recorded")
            skipped: list[str] = []
        else:
            restored, skipped = ov.restore(journal["base_commit"], paths, expect)
            log(f"undid an interrupted apply (pid {pid}): restored {len(restored)} of {len(paths)} files")
    else:
        _, skipped = ov.restore(journal["to_commit"], paths, expect)
        if head == journal["base_commit"]:
            ov.commit(files, journal["message"])
        log(f"finished an interrupted rollback (pid {pid})")
    if skipped:
        log(f"left as found, changed since the interrupted run: {listing(skipped)}")
    sync_state(ov, target, files)
    ov.clear_journal()


@contextlib.contextmanager
def settled_on_failure(ov: Overlay, target: Target, files: list[str], log: Log) -> Iterator[None]:
    """A write that failed mid-run (a full disk, git refusing): finish or undo it at once, as the next
    run would after a kill, and say in one line which; if that fails too, the journal stays for the next run."""
    try:
        yield
    except (OSError, OverlayError) as exc:
        if isinstance(exc, (DamagedOverlayError, LockedError, StateDirError, GitMissingError, UnsafeWriteError,
                            UntrustedOverlayError)):
            raise
        cause = (f"cannot write {exc.filename or 'a file'}: {exc.strerror or exc}" if isinstance(exc, OSError)
                 else str(exc))
        try:
            journal = ov.journal()
        except DamagedOverlayError:
            journal = None
        if journal is None:
            if isinstance(exc, OverlayError):
                raise
            raise OverlayError(f"{cause}; the installed files were not changed") from None
        op = journal["op"]
        try:
            recover(ov, target, files, log)
        except (OSError, OverlayError):
            raise OverlayError(f"{cause}; the {op} is cut short and journaled: the next apply or rollback "
                               f"finishes or undoes it (free space first)") from None
        if op == "apply" and ov.head_commit() == journal["base_commit"]:
            raise OverlayError(f"{cause}; the files were restored: nothing was changed") from None
        raise OverlayError(f"{cause}; the {op} was finished and recorded after all") from None

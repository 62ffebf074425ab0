"""One change of the installed package as the overlay records it (an apply, a rollback): its steps
are the methods of one object, in the order they run.

`Transaction.begin` takes the lock, finishes or undoes what a killed run's journal says
(`recovery.py`) and, for the whole body, settles a write that fails (a full disk) at once; the
baseline steps make the overlay's HEAD what is installed (`record_original` for apply,
`settle_for_rollback`); `write` journals, then writes each file atomically; then `commit` records
the files and clears the journal, or `restore` writes back what HEAD holds. A run killed between
any two steps is finished or undone by the next `begin`. The commands take no step of
`baseline.py`, `repo.py` and `recovery.py` themselves (rollback's check of the bytes against
RECORD, `baseline.record_mismatches`, only reads).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from ..errors import OverlayError
from ..fsutil import hash_file, record_hash
from .baseline import (
    another_release,
    check_original,
    commit_message,
    fresh_state,
    package_of,
    prepare,
    read_trailers,
    record_mismatches,
    refuse_foreign_edits,
    refuse_links,
    sync_state,
)
from .recovery import recover, settled_on_failure

if TYPE_CHECKING:
    from ..settings import Log
    from ..target import Target
    from .layout import State
    from .repo import Overlay


class Transaction:
    """The overlay of `target`, held under its lock for one apply or rollback of `files` (the
    distribution's files it records). Made by `begin` only."""

    def __init__(self, overlay: Overlay, target: Target, files: list[str], log: Log):
        self.overlay = overlay
        self.target = target
        self.files = files
        self.log = log
        # HEAD when `write` ran, and what it wrote: what `restore` puts back.
        self._base: str | None = None
        self._written: list[str] = []

    @classmethod
    @contextlib.contextmanager
    def begin(cls, overlay: Overlay, target: Target, files: list[str], log: Log,
              wait: bool = False) -> Iterator[Transaction]:
        """Lock, recover a killed run, and settle a failed write of the body (`recovery.settled_on_failure`)."""
        with overlay.locked(wait), settled_on_failure(overlay, target, files, log):
            recover(overlay, target, files, log)
            yield cls(overlay, target, files, log)

    @property
    def who(self) -> str:
        return f"{self.target.package} {self.target.version}"

    # ---------------------------------------------------------------- the baseline

    def record_original(self, accept_modified: bool, wheel: str | None = None, index: bool = True) -> None:
        """Make HEAD what is installed: record the original (RECORD-verified; hand-edited files
        from their pristine bytes: `--wheel`, the caches, the index unless `index` is off), or a
        reinstall or accepted drift as a new baseline."""
        from .pristine import finder

        prepare(self.overlay, self.target, accept_modified, self.log,
                pristine=finder(self.target, wheel, index, self.log))

    def settle_for_rollback(self) -> tuple[int, str] | None:
        """Before rollback writes: a reinstall becomes the new original; edits made outside the
        tool are saved in the history: (how many files, the commit keeping them), else None."""
        ov, target, files = self.overlay, self.target, self.files
        refuse_links(target, files)
        state = fresh_state(ov, target, files)
        recorded = another_release(state, target)
        if recorded is not None:
            # Another release was installed under us: as pip wrote it, it is its own original; edited,
            # there is no original of it to restore, and never another release's.
            mismatched = record_mismatches(target, files)
            if mismatched:
                refuse_foreign_edits(target, recorded, mismatched, rollback=True)
            prepare(ov, target, accept_modified=False, log=self.log)
            return None
        if state.files != files:
            # The same release with another file list: edits are grafted onto its own original.
            prepare(ov, target, accept_modified=True, log=self.log)
            return None
        edited = [p for p in files if hash_file(target.location / p) != state.head.get(p)]
        if edited and not record_mismatches(target, files):
            # Every file is what pip wrote: a reinstall, which is the new original.
            prepare(ov, target, accept_modified=False, log=self.log)
            return None
        if not edited:
            return None
        from ..words import listing

        # Edits made outside the tool are about to be overwritten: keep them in the history.
        saved = ov.commit(files, commit_message("drift", f"edits made outside this tool to {self.who}",
                                                [f"Files: {listing(edited)}"], {"Package": self.who}))
        return len(edited), saved

    # ---------------------------------------------------------------- what the overlay holds

    def state(self) -> State:
        """state.json as the last step left it (the baseline steps write it)."""
        state = self.overlay.state()
        assert state is not None, "read after a baseline step"
        return state

    def local_files(self) -> list[str] | None:
        """The files edited by hand that the rules plan from (the `local` commit), or None."""
        data = self.state().data
        return data.get("local_files") if data.get("local_commit") else None

    def recorded(self) -> bool:
        """Every file is what HEAD records."""
        head = self.state().head
        return all(hash_file(self.target.location / p) == head.get(p) for p in self.files)

    def resolve(self, label: str) -> str:
        """The commit of `label`, refused when it is a state of another installed version."""
        commit = self.overlay.resolve(label)
        recorded = package_of(read_trailers(self.overlay, commit))
        if recorded and recorded != (self.target.package, self.target.version):
            raise OverlayError(
                f"{label} is a state of {' '.join(recorded)}, but {self.who} is installed: roll back "
                f"within the installed version, or reinstall {' '.join(recorded)} first"
            )
        return commit

    def changes_to(self, commit: str, original: bool) -> dict[str, bytes]:
        """The files whose installed bytes differ from `commit`'s (`original`: that commit's bytes
        checked against RECORD first, so a moved tag or a planted commit writes nothing)."""
        wanted = self.overlay.tree_files(commit, self.files)
        if original:
            check_original(self.overlay, self.target, commit, wanted)
        return {p: d for p, d in wanted.items()
                if d is not None and hash_file(self.target.location / p) != record_hash(d)}

    # ---------------------------------------------------------------- writing and its end

    @staticmethod
    def message(kind: str, title: str, body: list[str], trailers: dict[str, str]) -> str:
        """A commit message of `kind` (`Vsp-Kind`), its trailers after the body (`baseline.commit_message`)."""
        return commit_message(kind, title, body, trailers)

    def write(self, op: str, writes: Mapping[str, bytes], **journal: Any) -> None:
        """Journal (`op`, HEAD, each file's hash before and after, `journal`'s entries), then
        write each file atomically. A failure is settled by `begin`: the journal says what to undo."""
        head = self.overlay.head_commit()
        assert head is not None, "written after a baseline step"
        self._base, self._written = head, sorted(writes)
        self.overlay.write_files(op, writes, head, package=self.who, **journal)

    def restore(self) -> list[str]:
        """Write back what HEAD held before `write` for the files it wrote; the journal cleared.
        Returns the files restored."""
        restored: list[str] = []
        if self._base is not None:
            restored, _ = self.overlay.restore(self._base, self._written)
        self.overlay.clear_journal()
        return restored

    def commit(self, message: str, tag: str | None = None) -> str:
        """Record the files as they are now, rebuild state.json from git, clear the journal."""
        commit = self.overlay.commit(self.files, message, tag=tag)
        sync_state(self.overlay, self.target, self.files)
        self.overlay.clear_journal()
        return commit

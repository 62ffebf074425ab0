"""What the engine says of each file: plain data, importing no libcst (a cached plan is read
without the engine)."""

from __future__ import annotations

from dataclasses import dataclass

from ..kinds import Action, FileStatus

MOVE_EDIT = "move to"  # how a site's message names a move


@dataclass(frozen=True)
class Site:
    rule_id: str
    path: str
    line: int
    end_line: int  # the call's last line, so a diff hunk anywhere inside it names the rule
    callee: str
    action: Action
    message: str
    guarded: bool
    # What a `move` pointed the call at (`module.name`), as data: the audit tells the import a
    # move took out by it.
    moves: tuple[str, ...] = ()
    # A site not needed because another rule's edit leaves its code unbound (it never runs once
    # that rule applies): that rule's id. The rehearsal names it as the fix of a failure there.
    by: str = ""


@dataclass(frozen=True)
class FileResult:
    path: str  # relative to the package root, "/"-separated
    status: FileStatus
    before: bytes = b""
    after: bytes = b""
    sites: tuple[Site, ...] = ()
    reason: str = ""

    @property
    def changed(self) -> bool:
        return self.status is FileStatus.CHANGED

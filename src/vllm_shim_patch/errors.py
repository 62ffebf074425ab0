"""One exception hierarchy: the CLI turns every PatchError into a one-line message and exit 2.

`Refused` is the one a command answers itself, with exit 1. Anything else that escapes is a bug
in the tool and keeps its traceback.
"""

from __future__ import annotations

from pathlib import Path


class PatchError(Exception):
    """An error the user can act on; anything else is a bug in the tool."""


class RuleError(PatchError):
    """A rule file that cannot be loaded: names the file, the line and the rule id."""

    def __init__(self, path: str | Path, line: int | None, rule_id: str | None, message: str):
        self.path = str(path)
        self.line = line
        self.rule_id = rule_id
        self.message = message
        where = self.path if line is None else f"{self.path}:{line}"
        rule = f" rule {rule_id!r}:" if rule_id else ""
        super().__init__(f"{where}:{rule} {message}")


class TargetError(PatchError):
    """The target interpreter or the installed package cannot be used."""


class OverlayError(PatchError):
    """The git overlay cannot be read or written."""


class StateDirError(OverlayError):
    """The state dir (--state-dir, $XDG_STATE_HOME or ~/.local/state) cannot hold the overlay."""


class DamagedOverlayError(OverlayError):
    """The overlay's records (state.json, journal.json, git objects) cannot be trusted."""


class LockedError(OverlayError):
    """Another process holds the overlay lock."""


class GitMissingError(OverlayError):
    """No git executable: nothing in the overlay can be read (not: the overlay lacks a state)."""


class UntrustedOverlayError(OverlayError):
    """The overlay is not this install's or not only this user's: a link, another owner, writable by
    others, or recorded for another location or release; refused before anything is read from it."""


class UnsafeWriteError(OverlayError):
    """A write the overlay asked for that RECORD does not allow (a path outside the package's own
    files, or through a link); refused before the first byte is written."""


class VerifyError(PatchError):
    """Verification could not run at all (not: it ran and found a mismatch)."""


class SignatureError(PatchError):
    """A signature source cannot be used (vLLM fails to import, source missing)."""


class UsageError(PatchError):
    """A bad option value or combination (exit 2 like every input error)."""


class Refused(PatchError):
    """The input is good but what it finds refuses the work (the patch on the target drifted, or did
    not pass in a scratch copy): one line, exit 1, nothing written. The command that raises it
    answers it (JSON kind "Refused"); it never reaches the CLI's boundary, whose exit 2 is for input."""


class CodemodError(RuleError):
    """A codemod that cannot be loaded: it fails to import, exits, or defines no transform."""

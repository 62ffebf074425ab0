"""The diff: unified, `patch -p1`-ready, each hunk header naming the rules it carries out."""

from __future__ import annotations

import difflib
import io
import re
import tokenize
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..kinds import Action
from ..words import agree, listing, plural

if TYPE_CHECKING:
    from ..rewrite.results import FileResult, Site
    from ..rewrite.plan import Plan

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+\d+(?:,\d+)? @@")


def _text(data: bytes) -> str:
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError:
        encoding = "utf-8"
    return data.decode(encoding, errors="surrogateescape")


@dataclass(frozen=True)
class Hunk:
    """One hunk of a file's diff and the edited sites it carries (the unit of interactive review)."""

    path: str
    text: str  # from its "@@" line on
    sites: tuple[Site, ...]

    @property
    def keys(self) -> set[tuple[str, int, str]]:
        return {(s.path, s.line, s.rule_id) for s in self.sites}


def hunks(result: FileResult) -> list[Hunk]:
    before = _text(result.before).splitlines(keepends=True)
    after = _text(result.after).splitlines(keepends=True)
    lines = list(difflib.unified_diff(before, after, f"a/{result.path}", f"b/{result.path}"))[2:]
    edited = [s for s in result.sites if s.action is Action.EDITED]
    out: list[Hunk] = []
    for line in lines:
        m = _HUNK.match(line)
        if m:
            start = int(m.group(1))
            length = int(m.group(2) or "1")
            sites = tuple(s for s in edited if s.line < start + max(length, 1) and s.end_line >= start)
            ids = dict.fromkeys(s.rule_id for s in sites)
            out.append(Hunk(result.path, line.rstrip("\n") + (" " + ", ".join(ids) if ids else "") + "\n", sites))
            continue
        if not line.endswith("\n"):
            line += "\n\\ No newline at end of file\n"
        last = out[-1]
        out[-1] = Hunk(last.path, last.text + line, last.sites)
    return out


def file_header(path: str) -> str:
    return f"--- a/{path}\n+++ b/{path}\n"


def file_diff(result: FileResult) -> str:
    """A `patch -p1`-ready diff of one file, each hunk header naming the rules it carries out."""
    parts = hunks(result)
    return file_header(result.path) + "".join(h.text for h in parts) if parts else ""


def render_diff(plan: Plan) -> str:
    return "".join(file_diff(r) for r in plan.changed)


def colorize(diff: str) -> str:
    import click

    colors = {"+": "green", "-": "red", "@": "cyan"}
    out = []
    for line in diff.splitlines(keepends=True):
        if line.startswith(("+++", "---")):
            out.append(click.style(line, bold=True))
        elif line[:1] in colors:
            out.append(click.style(line, fg=colors[line[:1]]))
        else:
            out.append(line)
    return "".join(out)


def untracked_installed(who: str, differ: list[str]) -> str:
    """`diff --installed` of a package never recorded: only RECORD to compare with."""
    if not differ:
        return f"{who} as installed is its original (RECORD-exact): nothing to show"
    n = len(differ)
    return (f"{who} is not tracked and {plural(n, 'file')} {agree(n, 'differs', 'differ')} from RECORD "
            f"({listing(differ)}): the tool never recorded the original bytes, so there is no diff to show")


def local_header() -> str:
    """`diff --installed` above the user's own hunks (`patch` skips lines before a `---`)."""
    return "# local edits (not by this tool): the pristine original -> 'local'\n"


def rules_header() -> str:
    return "# this tool's rules (each hunk names its rules): 'local' -> installed\n"


def installed_summary(who: str, changed: int, local: int = 0) -> str:
    if local:
        return (f"{who} as installed: {plural(local, 'file')} with hand edits not by this tool (local), "
                f"{plural(changed, 'file')} changed by the rules on top")
    return (f"{who} as installed: {plural(changed, 'file')} {agree(changed, 'differs', 'differ')} from the original"
            if changed
            else f"{who} as installed is its original: nothing to show")

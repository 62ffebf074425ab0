"""Render plans: unified diff with the rule behind each hunk, a summary line, JSON."""

from __future__ import annotations

import difflib
import io
import re
import tokenize
from dataclasses import dataclass
from typing import Any

from .engine import EDITED, NEEDS_HUMAN, NOT_NEEDED, NOTICE, FileResult, Site
from .plan import Plan
from .report_text import plural

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
    edited = [s for s in result.sites if s.action == EDITED]
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


def site_lines(plan: Plan, verbose: bool = False) -> list[str]:
    """One line per site a human should read: needs-human, notices, guard decisions."""
    shown = {NEEDS_HUMAN, NOTICE, NOT_NEEDED} | ({EDITED} if verbose else set())
    out = []
    for site in plan.sites:
        if site.action in shown:
            guard = "guarded" if site.guarded else "unguarded"
            out.append(f"{site.path}:{site.line}: {site.rule_id} [{site.action}, {guard}] {site.message}")
    for r in plan.problems:
        out.append(f"{r.path}: {r.status}: {r.reason}")
    return out


def summary(plan: Plan) -> str:
    edits = plan.edited
    guard = plan.signature_kind or "unguarded"
    parts = [
        f"{plural(len(edits), 'edit')} in {plural(len(plan.changed), 'file')}",
        f"vLLM {plan.version} ({guard})",
    ]
    if plan.needs_human:
        parts.append(f"{plural(len(plan.needs_human), 'site')} left for a human")
    if plan.notices:
        parts.append(f"{plural(len(plan.notices), 'notice')} for a human")
    skipped = [r for r in plan.problems if r.status == "skipped"]
    failed = [r for r in plan.problems if r.status == "failed"]
    if skipped:
        parts.append(f"{plural(len(skipped), 'file')} skipped")
    if failed:
        parts.append(f"{plural(len(failed), 'file')} failed")
    return "; ".join(parts)


def plan_json(plan: Plan) -> dict[str, Any]:
    t = plan.target
    return {
        "package": {"name": t.package, "version": t.version, "location": str(t.location)},
        "python": t.python,
        "vllm": {
            "target": str(plan.version),
            "installed": t.vllm_version,
            "note": plan.version_note,
            "signatures": plan.signature_kind,
        },
        "files": [
            {
                "path": r.path,
                "status": r.status,
                "reason": r.reason or None,
                "diff": file_diff(r) if r.changed else None,
                "sites": [
                    {
                        "rule": s.rule_id,
                        "line": s.line,
                        "callee": s.callee,
                        "action": s.action,
                        "message": s.message,
                        "guarded": s.guarded,
                    }
                    for s in r.sites
                ],
            }
            for r in plan.results
            if r.status != "unchanged" or r.sites
        ],
        "summary": {
            "files_changed": len(plan.changed),
            "edits": len(plan.edited),
            "needs_human": len(plan.needs_human),
            "skipped": sum(r.status == "skipped" for r in plan.results),
            "failed": sum(r.status == "failed" for r in plan.results),
            "rules": plan.rule_ids,
        },
    }

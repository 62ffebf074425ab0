"""A plan as text and JSON: the lines a human must read, the summary line, the dry-run JSON."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..kinds import Action, FileStatus
from .diff import file_diff
from ..words import plural

if TYPE_CHECKING:
    from ..rewrite.results import Site
    from ..rewrite.plan import Plan


def site_line(site: Site) -> str:
    guard = "guarded" if site.guarded else "unguarded"
    return f"{site.path}:{site.line}: {site.rule_id} [{site.action}, {guard}] {site.message}"


def problem_lines(plan: Plan) -> list[str]:
    """Files the engine skipped or failed on."""
    return [f"{r.path}: {r.status}: {r.reason}" for r in plan.problems]


def note_lines(plan: Plan) -> list[str]:
    """The note on where the vLLM version came from, and on a vLLM beyond the rehearsed ones."""
    newer = newer_line(str(plan.version))
    return [*([f"note: {plan.version_note}"] if plan.version_note else []), *([newer] if newer else [])]


def newer_line(version: str) -> str | None:
    """A vLLM series the compatibility matrix never rehearsed: the rules were written for older
    internals, so only a rehearsal on this box is evidence (a fact, not a refusal)."""
    from ..fleet.rehearsed import newer_than_rehearsed

    newest = newer_than_rehearsed(version)
    if newest is None:
        return None
    return f"note: vLLM {version} is newer than any release these rules were rehearsed on ({newest})"


def site_lines(plan: Plan, verbose: bool = False) -> list[str]:
    """One line per site a human should read: needs-human, notices, guard decisions."""
    shown = {Action.NEEDS_HUMAN, Action.NOTICE, Action.NOT_NEEDED} | ({Action.EDITED} if verbose else set())
    return [site_line(s) for s in plan.sites if s.action in shown] + problem_lines(plan)


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
    skipped = [r for r in plan.problems if r.status is FileStatus.SKIPPED]
    failed = [r for r in plan.problems if r.status is FileStatus.FAILED]
    if skipped:
        parts.append(f"{plural(len(skipped), 'file')} skipped")
    if failed:
        parts.append(f"{plural(len(failed), 'file')} failed")
    return "; ".join(parts)


def already_patched(who: str, plan: Plan) -> str:
    edits = f"{plural(len(plan.edited), 'edit')} in {plural(len(plan.changed), 'file')}"
    return (f"{who} is already patched for vLLM {plan.version} ({edits}, all installed): apply would "
            f"write nothing; patch-speculators diff --installed shows the patch")


def plan_json(plan: Plan) -> dict[str, Any]:
    from ..fleet.rehearsed import newer_than_rehearsed

    t = plan.target
    return {
        "package": {"name": t.package, "version": t.version, "location": str(t.location)},
        "python": t.python,
        "vllm": {
            "target": str(plan.version),
            "installed": t.vllm_version,
            "note": plan.version_note,
            "signatures": plan.signature_kind,
            "newer_than_rehearsed": newer_than_rehearsed(str(plan.version)),
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
            if r.status is not FileStatus.UNCHANGED or r.sites
        ],
        "summary": {
            "files_changed": len(plan.changed),
            "edits": len(plan.edited),
            "needs_human": len(plan.needs_human),
            "skipped": sum(r.status is FileStatus.SKIPPED for r in plan.results),
            "failed": sum(r.status is FileStatus.FAILED for r in plan.results),
            "rules": plan.rule_ids,
        },
    }

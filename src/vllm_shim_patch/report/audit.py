"""The audit as text and JSON."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .text import plural

if TYPE_CHECKING:
    from ..analysis.audit import AuditRow


def render(rows: list[AuditRow], who: str, against: str, verbose: bool) -> tuple[str, dict[str, Any]]:
    lines = [f"{who} against {against}: {plural(len(rows), 'call')} into vLLM"]
    for row in rows:
        b = row.before
        if row.fixed:
            lines.append(f"  {b.line()} -> fixed by {', '.join(row.rules) or 'the rules'}")
        elif row.remaining:
            final = row.after or row.before
            lines.append(f"  {final.line()} -> no rule fixes this; suggested rule:")
            lines += ["      " + line for line in row.suggestion.splitlines()]
        elif b.status == "unknown" or verbose:
            lines.append(f"  {b.line()}")
    fixed = sum(r.fixed for r in rows)
    remaining = sum(r.remaining for r in rows)
    unknown = sum((r.after or r.before).status == "unknown" for r in rows)
    ok = len(rows) - fixed - remaining - unknown
    lines.append(
        f"{plural(len(rows), 'call')}: {ok} ok, {fixed} fixed by the rules, "
        f"{remaining} still mismatched, {unknown} unknown"
    )
    data = {
        "calls": [
            {**r.before.as_dict(), "after": r.after.as_dict() if r.after else None, "rules": list(r.rules),
             "fixed": r.fixed, "remaining": r.remaining, "suggestion": r.suggestion or None}
            for r in rows
        ],
        "summary": {"calls": len(rows), "ok": ok, "fixed": fixed, "remaining": remaining, "unknown": unknown},
    }
    return "\n".join(lines), data

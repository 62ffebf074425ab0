"""Preflight: every call from the package into vLLM, bound before and after the rules would run.

A mismatch the rules fix is reported with the rule; one they do not fix gets a suggested rule.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .calls import CallRecord, scan
from .engine import EDITED
from .report_text import plural
from .verify import Binding, bind_all

if TYPE_CHECKING:
    from .plan import Plan

_UNEXPECTED = re.compile(r"unexpected keyword argument '(\w+)'")
_MISSING = re.compile(r"missing required arguments? (.+)$")


@dataclass(frozen=True)
class AuditRow:
    before: Binding  # the call as the package has it now
    after: Binding | None  # the same call once the rules ran (None: the file is not changed)
    rules: tuple[str, ...]
    suggestion: str  # a YAML rule for a mismatch no rule fixes

    @property
    def fixed(self) -> bool:
        return self.before.status == "mismatch" and self.after is not None and self.after.status == "ok"

    @property
    def remaining(self) -> bool:
        final = self.after if self.after is not None else self.before
        return final.status == "mismatch"


def suggest(call: CallRecord, reason: str, version: str) -> str:
    """A rule skeleton for one mismatch, in the bundled pack's own format."""
    short = call.callee.rsplit(".", 1)[1].lower()
    if m := _UNEXPECTED.search(reason):
        name = m.group(1)
        op = f"drop: [{name}]"
        rid = f"{short}-drop-{name}"
    elif m := _MISSING.search(reason):
        names = re.findall(r"'(\w+)'", m.group(1))
        op = "add: {" + ", ".join(f'{n}: "TODO: an expression"' for n in names) + "}"
        rid = f"{short}-add-{'-'.join(names)}"
    else:
        op = f'notice: "{reason}"'
        rid = f"{short}-notice"
    rid = rid.replace("_", "-")
    return "\n".join([
        f"- id: {rid}",
        f"  call: {call.callee}",
        f'  since: "{version}"',
        f"  {op}",
        f'  why: "vLLM {version}: {reason}"',
    ])


def audit_plan(plan: Plan, originals: dict[str, bytes], signatures: dict[str, Any], note: str) -> list[AuditRow]:
    """Bind every call into vLLM in the original files and, where the plan changes a file, after it."""
    changed = {r.path: r for r in plan.changed}
    rows = []
    for path in sorted(originals):
        before_calls = scan(originals[path], path)
        if not before_calls:
            continue
        result = changed.get(path)
        after_calls = scan(result.after, path) if result else []
        paired = len(after_calls) == len(before_calls)
        edited: dict[int, list[str]] = {}
        for site in (result.sites if result else ()):
            if site.action == EDITED:
                edited.setdefault(site.line, []).append(site.rule_id)
        before = bind_all(before_calls, signatures, note)
        after = bind_all(after_calls, signatures, note) if result and paired else [None] * len(before)
        for b, a in zip(before, after):
            rules = tuple(edited.get(b.call.line, ()))
            final = a if a is not None else b
            text = suggest(b.call, final.reason, str(plan.version)) if final.status == "mismatch" else ""
            rows.append(AuditRow(b, a, rules, text))
    return rows


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

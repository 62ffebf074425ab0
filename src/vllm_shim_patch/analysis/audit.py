"""The audit: every call from the package into vLLM, bound before and after the rules would run.

A mismatch the rules fix is reported with the rule; one they do not fix gets a suggested rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..rewrite.ops import OPERATIONS
from ..settings import Action, BindStatus
from .calls import CallRecord, scan
from .verify import Binding, bind_all

if TYPE_CHECKING:
    from ..rewrite.plan import Plan


@dataclass(frozen=True)
class AuditRow:
    before: Binding  # the call as the package has it now
    after: Binding | None  # the same call once the rules ran (None: the file is not changed)
    rules: tuple[str, ...]
    suggestion: str  # a YAML rule for a mismatch no rule fixes

    @property
    def fixed(self) -> bool:
        return self.before.status is BindStatus.MISMATCH and self.after is not None and self.after.status is BindStatus.OK

    @property
    def remaining(self) -> bool:
        final = self.after if self.after is not None else self.before
        return final.status is BindStatus.MISMATCH


def suggest(call: CallRecord, reason: str, version: str) -> str:
    """A rule skeleton for one mismatch, in the bundled pack's own format."""
    short = call.callee.rsplit(".", 1)[1].lower()
    found = next((hit for op in OPERATIONS.values() if op.suggest and (hit := op.suggest(reason))), None)
    suffix, op_line = found or ("notice", f'notice: "{reason}"')
    rid = f"{short}-{suffix}".replace("_", "-")
    return "\n".join([
        f"- id: {rid}",
        f"  call: {call.callee}",
        f'  since: "{version}"',
        f"  {op_line}",
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
            if site.action is Action.EDITED:
                edited.setdefault(site.line, []).append(site.rule_id)
        before = bind_all(before_calls, signatures, note)
        after = bind_all(after_calls, signatures, note) if result and paired else [None] * len(before)
        for b, a in zip(before, after):
            rules = tuple(edited.get(b.call.line, ()))
            final = a if a is not None else b
            text = suggest(b.call, final.reason, str(plan.version)) if final.status is BindStatus.MISMATCH else ""
            rows.append(AuditRow(b, a, rules, text))
    return rows

"""Verification in the target interpreter: an import smoke test, binding of rewritten calls, and
(when asked) the rehearsal, all in one target process."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..report.text import agree, plural
from ..settings import BindStatus
from .session import run_session

if TYPE_CHECKING:
    from ..rewrite.plan import Plan
    from ..target import Target
    from .calls import CallRecord

# (callees, the live probe's answer or None) → (qualname → Signature | None, kind, note):
# what `signatures.select.binding_signatures` answers.
Bindings = Callable[[set[str], "dict[str, Any] | None"], tuple[dict[str, Any], Any, str]]


@dataclass
class VerifyResult:
    ok: bool
    reason: str = ""
    lines: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    summary: str = ""
    rehearsal: dict[str, Any] | None = None  # the rehearsal's answer, when one ran


@dataclass(frozen=True)
class Binding:
    call: CallRecord
    status: BindStatus
    reason: str

    def line(self) -> str:
        why = f" ({self.reason})" if self.reason else ""
        return f"{self.call.path}:{self.call.line}: {self.call.callee}: {self.status}{why}"

    def as_dict(self) -> dict[str, Any]:
        return {"path": self.call.path, "line": self.call.line, "callee": self.call.callee,
                "status": self.status, "reason": self.reason}


def module_name(relpath: str) -> str:
    parts = relpath[: -len(".py")].split("/")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def bind_all(calls: Iterable[CallRecord], signatures: dict[str, Any], why_unknown: str) -> list[Binding]:
    out = []
    for call in calls:
        sig = signatures.get(call.callee)
        if sig is None:
            out.append(Binding(call, BindStatus.UNKNOWN, why_unknown or "signature unknown"))
            continue
        result = call.bind(sig)
        out.append(Binding(call, BindStatus(result.status), result.reason))  # type: ignore[attr-defined]
    return out


def _import_lines(results: list[dict[str, Any]]) -> list[str]:
    lines = []
    for r in results:
        if r["status"] == "ok":
            lines.append(f"import {r['module']}: ok ({r['seconds']:.2f}s)")
        elif r["status"] == "missing-dependency":
            lines.append(f"import {r['module']}: not tested, {r['missing']} is not installed in the target")
        else:
            lines.append(f"import {r['module']}: FAILED\n{r['traceback'].rstrip()}")
    return lines


def run_checks(target: Target, bindings: Bindings, modules: list[str], calls: list[CallRecord], *,
               live: bool = False, rehearse: dict[str, Any] | None = None) -> VerifyResult:
    """Import `modules`, bind `calls` (live: asked in the same target process), and rehearse when
    `rehearse` is a request; fail on an import failure or a binding mismatch. The rehearsal's
    answer is returned for the caller to judge (it knows the rules that match a failure)."""
    callees = sorted({c.callee for c in calls})
    ask_live = live and bool(callees)
    answer = None
    if modules or ask_live or rehearse is not None:
        answer = run_session(target, modules=modules or None, callees=callees if ask_live else None,
                             rehearse=rehearse)
    imports = (answer.imports if answer else None) or []
    signatures, kind, note = bindings(set(callees), answer.signatures if answer and ask_live else None)
    bound = bind_all(calls, signatures, note)
    lines = _import_lines(imports)
    if note:
        lines.append(f"note: {note}")
    lines += [b.line() for b in bound]
    rehearsal = answer.rehearsal if answer else None
    data = {"imports": imports, "signatures": kind, "bindings": [b.as_dict() for b in bound]}
    failed = [r for r in imports if r["status"] == "failed"]
    missing = sorted({r["missing"] for r in imports if r["status"] == "missing-dependency"})
    mismatches = [b for b in bound if b.status is BindStatus.MISMATCH]
    unknown = [b for b in bound if b.status is BindStatus.UNKNOWN]
    if failed:
        last = failed[0]["traceback"].strip().splitlines()[-1]
        return VerifyResult(False, f"import {failed[0]['module']} failed: {last}", lines, data, rehearsal=rehearsal)
    if mismatches:
        b = mismatches[0]
        n = len(mismatches)
        return VerifyResult(False, f"{plural(n, 'call')} {agree(n, 'does', 'do')} not bind: {b.line()}", lines, data,
                            rehearsal=rehearsal)
    parts = []
    if imports:
        ok_imports = sum(r["status"] == "ok" for r in imports)
        parts.append(f"imports {ok_imports}/{len(imports)} ok"
                     + (f" ({', '.join(missing)} missing in the target)" if missing else ""))
    if bound and kind is None:
        parts.append(f"{plural(len(bound), 'call')} not bound (no vLLM signatures)")
    elif bound:
        parts.append(f"calls {len(bound) - len(unknown)}/{len(bound)} bind ({kind})"
                     + (f", {len(unknown)} unknown" if unknown else ""))
    return VerifyResult(True, "", lines, data, "passed: " + ("; ".join(parts) or "nothing to check"),
                        rehearsal=rehearsal)


def verify_plan(target: Target, plan: Plan, bindings: Bindings, *, live: bool = False,
                rehearse: dict[str, Any] | None = None) -> VerifyResult:
    """Verification inside apply: the modules it changed, the calls it rewrote, the rehearsal."""
    from .calls import rewritten

    modules = sorted({module_name(r.path) for r in plan.changed})
    calls = [c for r in plan.changed for c in rewritten(r.before, r.after, r.path)]
    return run_checks(target, bindings, modules, calls, live=live, rehearse=rehearse)

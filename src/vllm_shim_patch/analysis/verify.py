"""Verification in the target interpreter: an import smoke test plus binding of rewritten calls."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import VerifyError
from ..report.text import agree, plural
from ..settings import BindStatus
from ..target import run_remote

if TYPE_CHECKING:
    from ..rewrite.plan import Plan
    from ..target import Target
    from .calls import CallRecord

# (qualname → Signature | None, kind, note): what `guard.binding_signatures` answers.
Bindings = Callable[[set[str]], tuple[dict[str, Any], Any, str]]

IMPORT_TIMEOUT = 600.0


@dataclass
class VerifyResult:
    ok: bool
    reason: str = ""
    lines: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    summary: str = ""


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


def import_check(target: Target, modules: list[str], timeout: float = IMPORT_TIMEOUT) -> list[dict[str, Any]]:
    """Import each module in a fresh target interpreter, from a neutral folder (no cwd shadowing)."""
    with tempfile.TemporaryDirectory(prefix="vsp-import-") as cwd:
        request = json.dumps({"modules": modules, "own": target.package.replace("-", "_").split(".")[0]})
        try:
            proc = run_remote(target.python, "import_check.py", stdin=request, timeout=timeout, cwd=cwd)
        except Exception as exc:
            raise VerifyError(f"import smoke test could not run: {exc}") from None
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-5:])
        raise VerifyError(f"import smoke test crashed the interpreter (exit {proc.returncode}): {tail}")
    return list(json.loads(proc.stdout))


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


def run_checks(target: Target, bindings: Bindings, modules: list[str], calls: list[CallRecord]) -> VerifyResult:
    """Import `modules`, bind `calls`; fail on an import failure or a binding mismatch."""
    imports = import_check(target, modules) if modules else []
    signatures, kind, note = bindings({c.callee for c in calls})
    bindings = bind_all(calls, signatures, note)
    lines = _import_lines(imports)
    if note:
        lines.append(f"note: {note}")
    lines += [b.line() for b in bindings]
    data = {"imports": imports, "signatures": kind, "bindings": [b.as_dict() for b in bindings]}
    failed = [r for r in imports if r["status"] == "failed"]
    missing = sorted({r["missing"] for r in imports if r["status"] == "missing-dependency"})
    mismatches = [b for b in bindings if b.status is BindStatus.MISMATCH]
    unknown = [b for b in bindings if b.status is BindStatus.UNKNOWN]
    if failed:
        last = failed[0]["traceback"].strip().splitlines()[-1]
        return VerifyResult(False, f"import {failed[0]['module']} failed: {last}", lines, data)
    if mismatches:
        b = mismatches[0]
        n = len(mismatches)
        return VerifyResult(False, f"{plural(n, 'call')} {agree(n, 'does', 'do')} not bind: {b.line()}", lines, data)
    parts = []
    if imports:
        ok_imports = sum(r["status"] == "ok" for r in imports)
        parts.append(f"imports {ok_imports}/{len(imports)} ok"
                     + (f" ({', '.join(missing)} missing in the target)" if missing else ""))
    if bindings and kind is None:
        parts.append(f"{plural(len(bindings), 'call')} not bound (no vLLM signatures)")
    elif bindings:
        parts.append(f"calls {len(bindings) - len(unknown)}/{len(bindings)} bind ({kind})"
                     + (f", {len(unknown)} unknown" if unknown else ""))
    return VerifyResult(True, "", lines, data, "passed: " + ("; ".join(parts) or "nothing to check"))


def verify_plan(target: Target, plan: Plan, bindings: Bindings) -> VerifyResult:
    """Verification inside apply: the modules it changed, and the calls it rewrote."""
    from .calls import rewritten

    modules = sorted({module_name(r.path) for r in plan.changed})
    calls = [c for r in plan.changed for c in rewritten(r.before, r.after, r.path)]
    return run_checks(target, bindings, modules, calls)

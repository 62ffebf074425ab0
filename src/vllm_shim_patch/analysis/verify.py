"""Verification in the target interpreter: an import smoke test plus binding of calls into vLLM.

The verdict is "passed" only when everything was really checked, "partial" when part of it could
not run (named in the summary), "failed" on an import failure or a call that does not bind.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import VerifyError
from ..report.text import agree, plural
from ..settings import Action, BindStatus
from ..target import run_remote

if TYPE_CHECKING:
    from ..rewrite.plan import Plan
    from ..target import Target
    from .calls import CallRecord

# (qualname → Signature | None, kind, note): what `guard.binding_signatures` answers.
Bindings = Callable[[set[str]], tuple[dict[str, Any], Any, str]]

IMPORT_TIMEOUT = 600.0

PASSED, PARTIAL, FAILED = "passed", "partial", "failed"


@dataclass
class VerifyResult:
    ok: bool  # nothing failed: passed, or partial
    reason: str = ""
    lines: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    summary: str = ""  # "passed: ..." or "partial: ...; not checked: ..."
    verdict: str = FAILED  # passed | partial | failed
    not_checked: list[str] = field(default_factory=list)
    notable: list[str] = field(default_factory=list)  # `lines` less the calls that bind


@dataclass(frozen=True)
class Binding:
    call: CallRecord
    status: BindStatus
    reason: str
    site: str = ""  # the rule that matched this call and left it as it was, and why

    def line(self) -> str:
        why = f" ({self.reason})" if self.reason else ""
        site = f"; {self.site}" if self.site else ""
        return f"{self.call.path}:{self.call.line}: {self.call.callee}: {self.status}{why}{site}"

    def as_dict(self) -> dict[str, Any]:
        out = {"path": self.call.path, "line": self.call.line, "callee": self.call.callee,
               "status": self.status, "reason": self.reason}
        if self.site:
            out["site"] = self.site
        return out


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


def bind_all(calls: Iterable[CallRecord], signatures: dict[str, Any], why_unknown: str,
             sites: Mapping[tuple[str, int], str] | None = None) -> list[Binding]:
    out = []
    for call in calls:
        site = (sites or {}).get((call.path, call.line), "")
        sig = signatures.get(call.callee)
        if sig is None:
            out.append(Binding(call, BindStatus.UNKNOWN, why_unknown or "signature unknown", site))
            continue
        result = call.bind(sig)
        out.append(Binding(call, BindStatus(result.status), result.reason, site))  # type: ignore[attr-defined]
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


def run_checks(target: Target, bindings: Bindings, modules: list[str], calls: list[CallRecord],
               sites: Mapping[tuple[str, int], str] | None = None) -> VerifyResult:
    """Import `modules`, bind `calls`; fail on an import failure or a binding mismatch.

    What could not run (an import whose dependencies the target lacks, a call without a known
    signature) makes the verdict "partial", never "passed", and is named in the summary.
    `sites` annotates calls a rule matched but left as they were: (path, line) -> why.
    """
    imports = import_check(target, modules) if modules else []
    signatures, kind, note = bindings({c.callee for c in calls}) if calls else ({}, None, "")
    bound = bind_all(calls, signatures, note, sites)
    lines = _import_lines(imports)
    if note:
        lines.append(f"note: {note}")
    notable = [*lines, *(b.line() for b in bound if b.status is not BindStatus.OK)]
    lines += [b.line() for b in bound]
    data: dict[str, Any] = {"imports": imports, "signatures": kind, "bindings": [b.as_dict() for b in bound]}
    failed = [r for r in imports if r["status"] == "failed"]
    mismatches = [b for b in bound if b.status is BindStatus.MISMATCH]
    if failed:
        last = failed[0]["traceback"].strip().splitlines()[-1]
        reason = f"import {failed[0]['module']} failed: {last}"
    elif mismatches:
        n = len(mismatches)
        reason = f"{plural(n, 'call')} {agree(n, 'does', 'do')} not bind: {mismatches[0].line()}"
    else:
        reason = ""
    verdict, summary, not_checked = _verdict(imports, bound, kind, reason)
    data.update(verdict=verdict, not_checked=not_checked)
    return VerifyResult(not reason, reason, lines, data, summary, verdict, not_checked, notable)


def _verdict(imports: list[dict[str, Any]], bound: list[Binding], kind: Any,
             reason: str) -> tuple[str, str, list[str]]:
    """(passed | partial | failed, the summary line, what could not be checked)."""
    missing = sorted({r["missing"] for r in imports if r["status"] == "missing-dependency"})
    untested = [r for r in imports if r["status"] == "missing-dependency"]
    unknown = [b for b in bound if b.status is BindStatus.UNKNOWN]
    not_checked = []
    if untested:
        not_checked.append(f"{plural(len(untested), 'import')} ({', '.join(missing)} missing in the target)")
    if unknown:
        why = "no vLLM signatures" if kind is None else ", ".join(sorted({b.reason for b in unknown}))
        not_checked.append(f"{plural(len(unknown), 'call')} ({why})")
    if reason:
        return FAILED, f"failed: {reason}", not_checked
    checked = []
    ok_imports = sum(r["status"] == "ok" for r in imports)
    if ok_imports:
        checked.append(f"{plural(ok_imports, 'import')} ok")
    if len(bound) > len(unknown):
        n = len(bound) - len(unknown)
        checked.append(f"{plural(n, 'call')} {agree(n, 'binds', 'bind')} ({kind})")
    if not_checked:
        done = ", ".join(checked) + "; " if checked else ""
        return PARTIAL, f"partial: {done}not checked: {', '.join(not_checked)}", not_checked
    return PASSED, "passed: " + (", ".join(checked) or "nothing to check"), not_checked


def verify_plan(target: Target, plan: Plan, bindings: Bindings) -> VerifyResult:
    """Verification inside apply: the modules it changed; every call into vLLM in them; and the
    calls at every site a rule matched but left as it was (declined in review, left for a human,
    a notice, not needed), wherever they are."""
    modules = sorted({module_name(r.path) for r in plan.changed})
    calls, sites = plan_calls(plan)
    return run_checks(target, bindings, modules, calls, sites)


def plan_calls(plan: Plan) -> tuple[list[CallRecord], dict[tuple[str, int], str]]:
    """The calls into vLLM apply must bind, and which of them a rule matched but did not change.

    A rewritten file is bound whole: a call the rules did not touch there may still miss what
    the installed vLLM requires (a hunk declined in review). Elsewhere, the calls inside the lines
    of each site a rule matched: the file is as installed, so those lines are the site's own.
    """
    from ..rewrite.scoped import line_map
    from .calls import scan

    left: dict[str, list[Any]] = {}
    for s in plan.sites:
        if s.action is not Action.EDITED:
            left.setdefault(s.path, []).append(s)
    calls: list[CallRecord] = []
    sites: dict[tuple[str, int], str] = {}
    for r in plan.results:
        if r.changed:
            found = scan(r.after, r.path)
            to_original = line_map(r.before.decode("utf-8", "surrogateescape"),
                                   r.after.decode("utf-8", "surrogateescape"))
        elif r.path in left:
            found = scan(r.after, r.path)
            to_original = int  # unchanged: its lines are the original's
        else:
            continue
        for call in found:
            start, end = to_original(call.line), to_original(call.end_line or call.line)
            matched = [s for s in left.get(r.path, ()) if s.line <= end and start <= s.end_line]
            # A call rule's site names its own call, not the calls nested in its arguments; a scoped
            # rule's site (a region, not a vLLM callee) names every call in it.
            notes = dict.fromkeys(f"{s.rule_id} {_LEFT[s.action]}" for s in matched
                                  if s.action in _LEFT and (s.callee == call.callee or not s.callee.startswith("vllm.")))
            if notes:
                sites[(call.path, call.line)] = "; ".join(notes)
            if r.changed or matched:
                calls.append(call)
    return calls, sites


# Sites whose binding line names the rule: the ones a person chose, or must, leave as they are.
_LEFT = {Action.DECLINED: "was declined in review", Action.NEEDS_HUMAN: "was left for a human",
         Action.NOTICE: "raised a notice"}

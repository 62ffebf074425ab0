"""Verification in the target interpreter: an import smoke test, binding of calls into vLLM and
(when asked) the rehearsal, all in one target process.

The verdict is "passed" only when everything was really checked, "partial" when part of it could
not run (named in the summary), "failed" on an import failure or a call that does not bind.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..signatures.words import bind_reason
from ..words import agree, plural
from ..kinds import Action, BindStatus
from .session import run_session

if TYPE_CHECKING:
    from ..rewrite.plan import Plan
    from ..signatures.model import BindResult
    from ..target import Target
    from .calls import CallRecord
    from .handoff import Answer, Request

# (callees, the live probe's answer or None) → (qualname → Signature | None, kind, note):
# what `signatures.select.binding_signatures` answers.
Bindings = Callable[[set[str], "dict[str, Any] | None"], tuple[dict[str, Any], Any, str]]

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
    rehearsal: Answer | None = None  # the rehearsal's answer, when one ran


@dataclass(frozen=True)
class Binding:
    call: CallRecord
    status: BindStatus
    reason: str
    site: str = ""  # the rule that matched this call and left it as it was, and why
    bound: BindResult | None = None  # how it bound, as data (status and reason come from it)

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
        out.append(Binding(call, result.status, bind_reason(result), site, result))
    return out


def shadow_reason(r: Mapping[str, Any]) -> str:
    loaded = r.get("loaded") or "a location without a file (a namespace or built-in module)"
    return (f"loaded from {loaded}, not from the installed {r['expected']} (a copy earlier on sys.path, "
            f"e.g. PYTHONPATH or the working folder, shadows the patched package)")


def raised(r: Mapping[str, Any], limit: int = 300) -> str:
    """What a failed import raised: the type, the lines of its message that say what is wrong,
    and where, from the exception the target sent (its traceback's last line only if none)."""
    exc = r.get("exception")
    if not exc:
        return str(r["traceback"]).strip().splitlines()[-1]
    message = " | ".join(str(exc.get("message") or "").splitlines())
    if len(message) > limit:
        message = message[:limit - 3] + "..."
    head = f"{exc['type']}: {message}" if message else str(exc["type"])
    return f"{head} (raised at {exc['at']})" if exc.get("at") else head


def _import_lines(results: list[dict[str, Any]]) -> list[str]:
    lines = []
    for r in results:
        if r["status"] == "ok":
            lines.append(f"import {r['module']}: ok ({r['seconds']:.2f}s)")
        elif r["status"] == "missing-dependency":
            lines.append(f"import {r['module']}: not tested, {r['missing']} is not installed in the target")
        elif r["status"] == "shadowed":
            lines.append(f"import {r['module']}: FAILED: {shadow_reason(r)}")
        else:
            lines.append(f"import {r['module']}: FAILED\n{r['traceback'].rstrip()}")
    return lines


def run_checks(target: Target, bindings: Bindings, modules: list[str], calls: list[CallRecord],
               sites: Mapping[tuple[str, int], str] | None = None, *, live: bool = False,
               rehearse: Request | None = None,
               unscanned: Mapping[str, str] | None = None) -> VerifyResult:
    """Import `modules`, bind `calls` (live: asked in the same target process), and rehearse when
    `rehearse` is a request; fail on an import failure or a binding mismatch.

    What could not run (an import whose dependencies the target lacks, a call without a known
    signature) makes the verdict "partial", never "passed", and is named in the summary.
    `sites` annotates calls a rule matched but left as they were: (path, line) -> why;
    `unscanned`, files whose calls could not be read (path -> why), are named as not checked. The
    rehearsal's answer is returned for the caller to judge (it knows the rules that match a failure).
    """
    callees = sorted({c.callee for c in calls})
    ask_live = live and bool(callees)
    answer = None
    if modules or ask_live or rehearse is not None:
        answer = run_session(target, modules=modules or None, callees=callees if ask_live else None,
                             rehearse=rehearse)
    imports = (answer.imports if answer else None) or []
    probe = answer.signatures if answer and ask_live else None
    signatures, kind, note = bindings(set(callees), probe) if calls else ({}, None, "")
    bound = bind_all(calls, signatures, note, sites)
    lines = _import_lines(imports)
    if note:
        lines.append(f"note: {note}")
    notable = [*lines, *(b.line() for b in bound if b.status is not BindStatus.OK)]
    lines += [b.line() for b in bound]
    data: dict[str, Any] = {"imports": imports, "signatures": kind, "bindings": [b.as_dict() for b in bound]}
    failed = [r for r in imports if r["status"] in ("failed", "shadowed")]
    mismatches = [b for b in bound if b.status is BindStatus.MISMATCH]
    if failed and failed[0]["status"] == "shadowed":
        reason = f"import {failed[0]['module']}: {shadow_reason(failed[0])}"
    elif failed:
        reason = f"import {failed[0]['module']} failed: {raised(failed[0])}"
    elif mismatches:
        n = len(mismatches)
        reason = f"{plural(n, 'call')} {agree(n, 'does', 'do')} not bind: {mismatches[0].line()}"
    else:
        reason = ""
    verdict, summary, not_checked = _verdict(imports, bound, kind, reason, unscanned or {})
    data.update(verdict=verdict, not_checked=not_checked)
    return VerifyResult(not reason, reason, lines, data, summary, verdict, not_checked, notable,
                        answer.rehearsal if answer else None)


def _verdict(imports: list[dict[str, Any]], bound: list[Binding], kind: Any,
             reason: str, unscanned: Mapping[str, str]) -> tuple[str, str, list[str]]:
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
    if unscanned:
        files = "; ".join(f"{p}: {why}" for p, why in sorted(unscanned.items()))
        not_checked.append(f"the calls in {plural(len(unscanned), 'file')} ({files})")
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


def verify_plan(target: Target, plan: Plan, bindings: Bindings, *, live: bool = False,
                rehearse: Request | None = None) -> VerifyResult:
    """Verification inside apply: the modules it changed; every call into vLLM in them; the
    calls at every site a rule matched but left as it was (declined in review, left for a human,
    a notice, not needed), wherever they are; and the rehearsal when asked."""
    modules = sorted({module_name(r.path) for r in plan.changed})
    unscanned: dict[str, str] = {}
    calls, sites = plan_calls(plan, unscanned)
    return run_checks(target, bindings, modules, calls, sites, live=live, rehearse=rehearse,
                      unscanned=unscanned)


def plan_calls(plan: Plan, unscanned: dict[str, str] | None = None
               ) -> tuple[list[CallRecord], dict[tuple[str, int], str]]:
    """The calls into vLLM apply must bind, and which of them a rule matched but did not change.

    A rewritten file is bound whole: a call the rules did not touch there may still miss what
    the installed vLLM requires (a hunk declined in review). Elsewhere, the calls inside the lines
    of each site a rule matched: the file is as installed, so those lines are the site's own.
    """
    from ..rewrite.scoped import line_map
    from .calls import Unscanned, scan

    left: dict[str, list[Any]] = {}
    for s in plan.sites:
        if s.action is not Action.EDITED:
            left.setdefault(s.path, []).append(s)
    calls: list[CallRecord] = []
    sites: dict[tuple[str, int], str] = {}
    for r in plan.results:
        if not r.changed and r.path not in left:
            continue
        try:
            found = scan(r.after, r.path)
        except Unscanned as exc:
            if unscanned is not None:
                unscanned[r.path] = exc.reason
            continue
        if r.changed:
            to_original = line_map(r.before.decode("utf-8", "surrogateescape"),
                                   r.after.decode("utf-8", "surrogateescape"))
        else:
            to_original = int  # unchanged: its lines are the original's
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

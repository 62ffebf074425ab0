"""The rehearsal in words: pass with what ran, or the first failure with its frames and fix."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..words import plural

if TYPE_CHECKING:
    from ..analysis.rehearse import Rehearsal


def _frame(frame: dict[str, Any] | None) -> str:
    if not frame:
        return "-"
    return f"{frame['file']}:{frame['line']}: {frame.get('code') or ''}".rstrip()


def _shapes(answer: dict[str, Any]) -> str:
    captured = answer.get("captured") or {}
    return "; ".join(f"layer {layer}: " + ", ".join("x".join(map(str, s)) for s in shapes)
                     for layer, shapes in captured.items())


def _pending(site: Any) -> str:
    return {"edited": "not applied yet: it would edit", "needs-human": "left for a human at",
            "declined": "declined in review at"}.get(str(site.action), f"{site.action} at")


def headline(r: Rehearsal) -> str:
    """One line: the verdict (used in apply's summary and as the rehearse command's last line)."""
    a = r.answer
    if r.passed:
        return (f"rehearsal passed: {plural(int(a.get('iterations', 0)), 'scheduler iteration')}, "
                f"hidden states captured ({_shapes(a)})")
    failure = r.failure
    if r.failed:
        where = failure.get("speculators_frame")
        at = f" at {where['file']}:{where['line']}" if where else ""
        return f"rehearsal failed in {a.get('stage')}{at}: {failure.get('exception', '?')}"
    return f"rehearsal could not run: {failure.get('exception', a.get('outcome'))}"


def lines(r: Rehearsal, *, verbose: bool = False) -> list[str]:
    """The report a person acts on: the failure's frames and the rule that fixes it."""
    a, failure = r.answer, r.failure
    out: list[str] = []
    if r.failed:
        out.append(f"  exception:   {failure.get('exception')}")
        out.append(f"  speculators: {_frame(failure.get('speculators_frame'))}")
        out.append(f"  vLLM:        {_frame(failure.get('vllm_frame'))}"
                   + (" (in the worker)" if failure.get("side") == "worker" else ""))
        if r.fixes:
            for site in r.fixes:
                out.append(f"  fix:         rule {site.rule_id} ({_pending(site)} {site.path}:{site.line})")
        elif r.pending:
            out.append(f"  fix:         no loaded rule matches this site; rules that would still change "
                       f"the package: {', '.join(r.pending)}")
        else:
            out.append("  fix:         no loaded rule matches this site")
    if verbose:
        out.append("real (as installed):")
        out += [f"  {item}" for item in a.get("real") or []]
        out.append("stood in:")
        out += [f"  {item}" for item in a.get("stood_in") or []]
        out.append("stand-ins checked against the vLLM code they replace:")
        out += [f"  {c['check']}: {'ok' if c['ok'] else 'MISMATCH ' + str(c.get('detail', ''))}"
                for c in a.get("checks") or []]
    return out

"""`audit`: every call into vLLM, bound as installed and after the rules; exit 1 if any stays broken."""

from __future__ import annotations

from .context import Context, Outcome


def audit(ctx: Context, *, verbose: bool = False) -> Outcome:
    from ..analysis.audit import audit_plan
    from ..analysis.calls import scan
    from ..report.audit import render

    plan = ctx.plan()
    originals = ctx.originals()
    callees = {c.callee for p, d in originals.items() for c in scan(d, p)}
    callees |= {c.callee for r in plan.changed for c in scan(r.after, r.path)}
    signatures, sig_kind, note = ctx.bindings(callees)
    rows = audit_plan(plan, originals, signatures, note)
    target = ctx.target
    installed = f"vLLM {target.vllm_version}" if target.vllm_version else "no installed vLLM"
    against = f"{installed}, rules for {plan.version} ({sig_kind or 'no'} signatures)"
    text, data = render(rows, ctx.who, against, verbose)
    if note:
        text = f"note: {note}\n{text}"
    data.update({"package": target.package, "version": target.version, "vllm": target.vllm_version,
                 "rules_for": str(plan.version), "signatures": sig_kind})
    return Outcome(text, data, 1 if data["summary"]["remaining"] else 0)

"""`audit`: every use of vLLM, checked as installed and after the rules; exit 1 if any stays broken."""

from __future__ import annotations

from .context import Context, Outcome


def audit(ctx: Context, *, verbose: bool = False, emit_rules: str | None = None) -> Outcome:
    from ..analysis.audit import Checker, audit_plan
    from ..analysis.calls import scan_uses
    from ..report.audit import render

    plan = ctx.plan()
    originals = ctx.originals()
    uses = {p: scan_uses(d, p) for p, d in originals.items()}
    after = {r.path: scan_uses(r.after, r.path) for r in plan.changed}
    callees = {u.callee for group in (*uses.values(), *after.values()) for u in group if u.is_call}
    signatures, sig_kind, note = ctx.bindings(callees)
    source = ctx.static_source
    members = None
    if source is not None:
        from ..analysis.members import Members

        members = Members(source._resolver.names)
    checker = Checker(signatures, note, members, source if sig_kind == "static" else None)
    rows = audit_plan(plan, uses, after, checker)
    target = ctx.target
    installed = f"vLLM {target.vllm_version}" if target.vllm_version else "no installed vLLM"
    against = f"{installed}, rules for {plan.version} ({sig_kind or 'no'} signatures)"
    text, data = render(rows, ctx.who, against, verbose)
    if note:
        text = f"note: {note}\n{text}"
    data.update({"package": target.package, "version": target.version, "vllm": target.vllm_version,
                 "rules_for": str(plan.version), "signatures": sig_kind})
    return Outcome(text, data, 1 if data["summary"]["remaining"] else 0)

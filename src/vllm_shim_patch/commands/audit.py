"""`audit`: every use of vLLM, checked as installed and after the rules; exit 1 if any stays broken."""

from __future__ import annotations

from typing import Any

from .context import Context, Outcome


def audit(ctx: Context, *, verbose: bool = False, emit_rules: str | None = None, rules: bool = True) -> Outcome:
    """`rules=False` checks the package as installed and skips planning the rules (no libcst)."""
    from ..analysis.audit import Checker, audit_plan
    from ..analysis.calls import scan_uses
    from ..report.audit import render

    if rules:
        plan = ctx.plan(reuse=True)
        version = str(plan.version)
    else:
        plan, version = None, str(ctx.check_version())
    originals = ctx.originals()
    uses = {p: scan_uses(d, p) for p, d in originals.items()}
    after = {r.path: scan_uses(r.after, r.path) for r in plan.changed} if plan is not None else {}
    callees = {u.callee for group in (*uses.values(), *after.values()) for u in group if u.is_call}
    signatures, sig_kind, note = ctx.bindings(callees)
    source = ctx.static_source
    members = None
    if source is not None:
        from ..analysis.members import Members

        members = Members(source.names)
    checker = Checker(signatures, note, members, source if sig_kind == "static" else None)
    rows = audit_plan(plan, uses, after, checker, version)
    target = ctx.target
    installed = f"vLLM {target.vllm_version}" if target.vllm_version else "no installed vLLM"
    rules_for = f"rules for {version}" if plan is not None else f"vLLM {version}, rules not applied"
    against = f"{installed}, {rules_for} ({sig_kind or 'no'} signatures)"
    text, data = render(rows, ctx.who, against, verbose, rules=plan is not None)
    if note:
        text = f"note: {note}\n{text}"
    data.update({"package": target.package, "version": target.version, "vllm": target.vllm_version,
                 "rules_for": version if plan is not None else None, "for": version, "signatures": sig_kind})
    if emit_rules is not None:
        line, data["emitted"] = _emit(ctx, rows, signatures, version, emit_rules)
        text = f"{text}\n{line}"
    return Outcome(text, data, 1 if data["summary"]["remaining"] else 0)


def _emit(ctx: Context, rows: list[Any], signatures: dict[str, Any], version: str, dest: str
          ) -> tuple[str, dict[str, Any]]:
    """Write the draft rule file for the remaining mismatches (nothing when no rule can say any)."""
    from pathlib import Path

    from ..analysis.draft import drafts, render
    from ..errors import UsageError
    from ..fsutil import atomic_write

    items, left = drafts(rows, signatures, version, {r.id for r in ctx.pack.rules} if "pack" in ctx.__dict__ else set())
    if not items:
        return (f"no mismatch a rule can express: {dest} not written",
                {"path": None, "rules": 0, "not_expressible": left})
    path = Path(dest).expanduser()
    try:
        atomic_write(path, render(items, left, version, ctx.who, ctx.target.package).encode("utf-8"))
    except OSError as exc:
        raise UsageError(f"--emit-rules {dest}: cannot write: {exc.strerror or exc}") from None
    placeholders = sum('"TODO: an expression"' in d.op for d in items)
    todo = f"; fill {placeholders} placeholder{'s' if placeholders != 1 else ''} before use" if placeholders else ""
    return (f"draft rules for {len(items)} mismatch{'es' if len(items) != 1 else ''} written to {path}{todo}",
            {"path": str(path), "rules": len(items), "ids": [d.id for d in items], "not_expressible": left})

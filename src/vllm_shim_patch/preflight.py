"""Preflight and after-the-fact checks: `verify` and `audit` on the installed package."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .baseline import original_bytes
from .patching import Outcome, load, open_overlay, signatures_for

if TYPE_CHECKING:
    from .cli import Settings


def verify_installed(s: Settings, *, all_calls: bool = False) -> Outcome:
    """`verify`: the modules the patch changed and the calls it rewrote (--all: every one)."""
    from .calls import rewritten, scan
    from .target import probe
    from .verify import module_name, run_checks

    target = probe(s.python, s.package)
    ov = open_overlay(s, target)
    pyfiles = target.python_files()
    originals = original_bytes(ov, target, pyfiles)
    current = {p: (target.location / p).read_bytes() for p in pyfiles}
    changed = [p for p in pyfiles if current[p] != originals.get(p, current[p])]
    if all_calls:
        # A package's __main__ runs its CLI when imported: it is not a module to smoke-test.
        modules = [module_name(p) for p in pyfiles if not p.endswith("/__main__.py")]
        calls = [c for p in pyfiles for c in scan(current[p], p)]
    else:
        modules = [module_name(p) for p in changed]
        calls = [c for p in changed for c in rewritten(originals[p], current[p], p)]
    result = run_checks(target, s, modules, calls)
    who = f"{target.package} {target.version}"
    if not all_calls and not changed:
        text = f"{who} is not patched: nothing to verify (verify --all checks every call into vLLM)"
        return Outcome(text, {"ok": True, **result.data}, 0)
    text = "\n".join([*result.lines, f"verify {who}: " + (result.summary if result.ok else f"FAILED: {result.reason}")])
    return Outcome(text, {"ok": result.ok, **result.data}, 0 if result.ok else 1)


def audit(s: Settings) -> Outcome:
    """Every call into vLLM, bound as installed and after the rules; exit 1 if any stays broken."""
    from .audit import audit_plan, render
    from .calls import scan
    from .guard import binding_signatures
    from .plan import make_plan

    target, pack = load(s)
    guard, kind = signatures_for(s, target, pack)
    ov = open_overlay(s, target)
    originals = original_bytes(ov, target, target.python_files())
    plan = make_plan(target, pack, s.extra.get("vllm_version"), guard, kind, files=originals)
    callees = {c.callee for p, d in originals.items() for c in scan(d, p)}
    callees |= {c.callee for r in plan.changed for c in scan(r.after, r.path)}
    signatures, sig_kind, note = binding_signatures(s, target, callees)
    rows = audit_plan(plan, originals, signatures, note)
    installed = f"vLLM {target.vllm_version}" if target.vllm_version else "no installed vLLM"
    against = f"{installed}, rules for {plan.version} ({sig_kind or 'no'} signatures)"
    text, data = render(rows, f"{target.package} {target.version}", against, s.verbose > 0)
    if note:
        text = f"note: {note}\n{text}"
    data.update({"package": target.package, "version": target.version, "vllm": target.vllm_version,
                 "rules_for": str(plan.version), "signatures": sig_kind})
    return Outcome(text, data, 1 if data["summary"]["remaining"] else 0)

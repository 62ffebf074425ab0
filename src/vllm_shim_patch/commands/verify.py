"""`verify [--all]`: import the changed modules in the target and bind the calls into vLLM."""

from __future__ import annotations

from typing import Any

from ..options import VerifyOptions
from .context import Context, Outcome


def verify(ctx: Context, opts: VerifyOptions) -> Outcome:
    """The modules the patch changed, every call into vLLM in them, and every call a rule names
    elsewhere (a site left as installed still has to bind); --all: every module, every call."""
    from ..analysis.calls import Unscanned, scan
    from ..analysis.verify import module_name, run_checks
    from ..report.apply import nothing_to_verify, verified

    unscanned: dict[str, str] = {}

    def calls_in(data: bytes, path: str) -> list[Any]:
        try:
            return scan(data, path)
        except Unscanned as exc:
            unscanned[path] = exc.reason  # named as not checked: the verdict cannot be "passed"
            return []

    target = ctx.target
    pyfiles = target.python_files()
    originals = ctx.files.originals()
    current = ctx.files.installed()
    # A file RECORD lists that is gone, where the overlay has its original, counts as changed: its
    # import is checked, and fails.
    changed = [p for p in pyfiles if current.get(p) != originals.get(p, current.get(p))]
    if opts.all_calls:
        # A package's __main__ runs its CLI when imported: it is not a module to smoke-test.
        modules = [module_name(p) for p in pyfiles if not p.endswith("/__main__.py")]
        calls = [c for p in pyfiles if p in current for c in calls_in(current[p], p)]
    else:
        modules = [module_name(p) for p in changed]
        if not changed:
            return Outcome(nothing_to_verify(ctx.who), {"ok": True, "imports": [], "signatures": None, "bindings": [],
                                  "verdict": "not patched", "not_checked": []}, 0)
        named = {c for r in ctx.rules.pack.rules for c in r.calls}
        calls = [c for p in pyfiles if p in current for c in calls_in(current[p], p) if p in changed or c.callee in named]
    result = run_checks(target, ctx.vllm.bindings, modules, calls, live=ctx.vllm.live, unscanned=unscanned)
    text = verified(result.lines, ctx.who, result.ok, result.summary, result.reason)
    return Outcome(text, {"ok": result.ok, **result.data}, 0 if result.ok else 1)

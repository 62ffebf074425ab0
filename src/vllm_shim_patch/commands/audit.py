"""`audit`: every use of vLLM, and every import of another package, checked as installed and after
the rules; exit 1 if any stays broken."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..options import AuditOptions
from . import preflight
from .context import Context, Outcome

if TYPE_CHECKING:
    from ..analysis.audit import AuditRow


def audit(ctx: Context, opts: AuditOptions) -> Outcome:
    """The package's files as installed, and where the rules would change one, after them;
    `opts.no_rules` skips planning the rules (no libcst)."""
    if opts.no_rules:
        ctx.start_probe()  # the target answers while the checks import and vLLM's source opens
    from dataclasses import replace

    from ..analysis.audit import Checker, audit_plan
    from ..analysis.calls import Unscanned, scan_imports, scan_uses, worker_extensions
    from ..analysis.packages import PackageChecker, audit_packages
    from ..analysis.packages import request as package_request
    from ..report import audit as report

    if not opts.no_rules:
        preflight.check_package(ctx.settings.package, ctx.rules.pack)
        plan = ctx.plan(ctx.files.originals(), reuse=True)
        version = str(plan.version)
    else:
        version = str(preflight.check_version(ctx.settings.vllm_version, ctx.target, ctx.vllm.source_version))
        plan = None
        preflight.refuse_editable(ctx.target)  # RECORD lists no source of its own: "0 uses" would not be true
        preflight.refuse_sourceless(ctx.target)
        ctx.files.overlay  # noqa: B018  (a damaged overlay stops every command, this one too)
    # The files as installed are what runs; the plan (from the original bytes) is what apply
    # would leave. A file the rules' edits are installed in has nothing pending.
    installed = ctx.files.installed()
    pending, applied = [], []
    for r in plan.changed if plan is not None else ():
        now = installed.get(r.path)
        if now == r.after:
            applied.append(r.path)
        else:
            # Edited since (by hand, or by older rules): which rule fixes which line is not known,
            # and the uses as installed are paired with the plan's through the installed bytes.
            pending.append(r if now == r.before else replace(r, before=now or b"", sites=()))
    unscanned: dict[str, str] = {}
    # The classes vLLM mixes into its Worker, as installed and as the rules leave them.
    extensions = worker_extensions([*installed.values(), *(r.after for r in pending)])

    def read(data: bytes, path: str, imports: bool = False) -> list[Any]:
        try:
            return scan_imports(data, path, skip) if imports else scan_uses(data, path, extensions=extensions)
        except Unscanned as exc:
            # What it could not read, it cannot vouch for: said, and exit 1 (a human reads it).
            unscanned.setdefault(path, exc.reason)
            return []

    uses = {p: read(d, p) for p, d in installed.items()}
    after = {r.path: read(r.after, r.path) for r in pending}
    callees = {u.callee for group in (*uses.values(), *after.values()) for u in group if u.is_call}
    target = ctx.target
    # The package's own top-level names (its folders and single-file modules), and vLLM's (checked
    # above), are not other packages.
    skip = {p.split("/")[0].removesuffix(".py") for p in target.python_files()} | {"vllm"}
    imports = {p: read(d, p, imports=True) for p, d in installed.items()}
    imports_after = {r.path: read(r.after, r.path, imports=True) for r in pending}
    wanted = package_request([u for group in (*imports.values(), *imports_after.values()) for u in group])
    answer, probe, why = _ask_target(ctx, wanted, callees)
    signatures, sig_kind, note = ctx.vllm.bindings(callees, probe=probe)
    source = ctx.vllm.source
    members = source.members if source is not None else None
    checker = Checker(signatures, note, members, source if sig_kind == "static" else None)
    rows = audit_plan(pending, uses, after, checker, version)
    others = PackageChecker(answer, target.package, why)
    packages = audit_packages(audit_plan(pending, imports, imports_after, others, version), others)
    if answer and ctx.settings.verbose:  # on stderr: the JSON and the report stay the same run to run
        ctx.log(report.imports_timed(len(answer.get("modules") or ()), float(answer.get("seconds") or 0)))
    against = report.against(target.vllm_version, version, plan is not None, applied, sig_kind)
    text, data = report.render(rows, ctx.who, against, ctx.settings.verbose > 0, rules=plan is not None,
                               unscanned=unscanned, packages=packages)
    missing = [p for p in target.python_files() if p not in installed]
    text = report.with_notes(text, [(p, (target.location / p).exists()) for p in missing], note)
    data.update({"package": target.package, "version": target.version, "vllm": target.vllm_version,
                 "rules_for": version if plan is not None else None, "for": version, "signatures": sig_kind,
                 "rules_installed_in": applied, "missing": missing})
    if opts.emit_rules is not None:
        line, data["emitted"] = _emit(ctx, rows, signatures, version, opts.emit_rules)
        text = f"{text}\n{line}"
    broken = data["summary"]["remaining"] or data["packages"]["summary"]["remaining"]
    return Outcome(text, data, 1 if broken or unscanned else 0)


def _ask_target(ctx: Context, modules: dict[str, list[str]], callees: set[str]
                ) -> tuple[dict[str, Any] | None, dict[str, Any] | None, str]:
    """The target's answer for the other packages' imports and, when calls bind live, vLLM's
    signatures, in one process (transformers and torch are imported once, by either); and why
    there is no answer for the imports, if not."""
    from ..analysis.session import run_session
    from ..errors import VerifyError

    live = bool(callees) and ctx.vllm.live
    if not modules and not live:
        return None, None, ""
    try:
        got = run_session(ctx.target, callees=sorted(callees) if live else None, packages=modules or None)
    except VerifyError as exc:
        # The signatures are asked again on their own; the imports stay unknown, with why.
        return None, None, f"not checked: {exc}"
    return got.packages, got.signatures, ""


def _emit(ctx: Context, rows: list[AuditRow], signatures: dict[str, Any], version: str, dest: str
          ) -> tuple[str, dict[str, Any]]:
    """Write the draft rule file for the remaining mismatches (nothing when no rule can say any)."""
    from pathlib import Path

    from ..analysis.draft import drafts, render
    from ..report import audit as report
    from ..errors import UsageError
    from ..fsutil import atomic_write

    items, left = drafts(rows, signatures, version, {r.id for r in ctx.rules.loaded.rules} if ctx.rules.loaded else set())
    if not items:
        return (report.emitted(dest, None, 0, 0), {"path": None, "rules": 0, "not_expressible": left})
    path = Path(dest).expanduser()
    try:
        atomic_write(path, render(items, left, version, ctx.who, ctx.target.package).encode("utf-8"))
    except OSError as exc:
        raise UsageError(f"--emit-rules {dest}: cannot write: {exc.strerror or exc}") from None
    placeholders = sum(1 for d in items if d.placeholders)  # rules with a value to fill in
    return (report.emitted(dest, str(path), len(items), placeholders),
            {"path": str(path), "rules": len(items), "ids": [d.id for d in items], "not_expressible": left})

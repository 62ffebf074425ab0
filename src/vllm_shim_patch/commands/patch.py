"""The apply transaction, shared below the commands: plan from the original bytes, review, write,
verify, commit; `apply` runs it on the target, `wheel` on a scratch copy of the release.

One overlay transaction (`overlay.transaction.Transaction`): the files are written atomically
under the lock with a journal, verified in the target, and only then committed to the overlay;
any failure restores the files as they were. What comes back is the outcome and the plan it wrote
(`Patched`), so a wheel is built from that plan, not from another.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..faults import checkpoint
from ..kinds import Action, FileStatus
from ..report import apply as text
from ..settings import ApplyOptions
from . import preflight
from .context import Context, Outcome, Review
from .pending import desired_files, pending_writes, unrecorded_with_rules

if TYPE_CHECKING:
    from ..analysis.rehearse import Rehearsal
    from ..overlay.transaction import Transaction
    from ..rewrite.plan import Plan


@dataclass(frozen=True)
class Patched:
    """What one apply did: its outcome, and the plan it wrote and recorded when that plan is the
    rules' own (None: refused before planning, failed, or with hunks declined by a review)."""

    outcome: Outcome
    plan: Plan | None = None


def patch(ctx: Context, opts: ApplyOptions) -> Patched:
    """Plan from the original bytes, write atomically, verify, then commit; restore on failure
    (`opts.interactive`: each hunk is offered to `ctx.review` first)."""
    from ..analysis.rehearse import model_request, topology
    from ..overlay.pristine import check_wheel
    from ..overlay.transaction import Transaction
    from ..rewrite.ops import compile_rule
    from ..rewrite.plan import select_version

    ctx.load()
    preflight.refuse_editable(ctx.target)
    preflight.refuse_patched_wheel(ctx.target, "apply")
    preflight.check_mounted_writable(ctx.target)
    signatures, _ = ctx.vllm.guard  # read the signatures before taking the lock
    # Every input error before the first write: a bad --vllm-version must not leave an overlay behind.
    select_version(ctx.target, ctx.rules.pack, ctx.settings.vllm_version, guarded=signatures is not None,
                   source=ctx.vllm.source_version)
    for rule in ctx.rules.pack.rules:
        compile_rule(rule)  # a codemod that cannot load fails here, not after the original is recorded
    if opts.wheel is not None:
        check_wheel(opts.wheel, ctx.target)  # missing, or another release's: exit 2 before the lock
    # A --model the rehearsal cannot build, a topology it cannot run: exit 2 now.
    topology(ctx.settings.tensor_parallel_size, ctx.settings.pipeline_parallel_size,
             model_request(ctx.settings.model, ctx.settings.arch, None if opts.no_rehearse else ctx.log), ctx.target)
    with Transaction.begin(ctx.files.overlay, ctx.target, ctx.files.tracked, ctx.log, opts.wait) as txn:
        txn.record_original(opts.accept_modified, opts.wheel, index=not opts.no_index)
        originals = ctx.files.originals()
        plan = _reviewed_plan(ctx, originals, ctx.review if opts.interactive else None)
        _report_plan(ctx, plan)
        failed = [r for r in plan.problems if r.status is FileStatus.FAILED]
        if failed:
            # Fail closed: a rule or codemod that broke on one file must not leave the others half-patched.
            return Patched(Outcome(text.failed_closed(failed[0].path, failed[0].reason),
                                   {"package": ctx.who, "changed": False, "failed": [r.path for r in failed]}, 1))
        writes = pending_writes(ctx, desired_files(plan, originals))
        local = txn.local_files()
        base = {"package": ctx.who, "vllm": str(plan.version), "signatures": plan.signature_kind,
                "rules": plan.rule_ids, "files": sorted(writes), "sites": len(plan.edited),
                **({"local": {"commit": txn.state().data["local_commit"], "files": local}} if local else {})}
        code = 0 if plan.clean and not _skipped_unrecorded(ctx) else 1
        whole = plan if not any(s.action is Action.DECLINED for s in plan.sites) else None
        if not writes and txn.recorded():
            return Patched(_nothing_to_do(ctx, plan, base, code), whole)
        if writes:
            preflight.check_writable(ctx.target, sorted(writes))
            txn.write("apply", writes)
        verdict, rehearsal = text.NO_VERIFY, {"Rehearsal": "not run (--no-verify)"}
        if not opts.no_verify:
            refused, verdict, unrehearsed, rehearsal = _verify(ctx, txn, plan, writes, base,
                                                               rehearse=not opts.no_rehearse)
            if refused is not None:
                return Patched(refused)
            if unrehearsed:
                # The files verified, so they are kept and recorded; but a rehearsal that could
                # not run is no pass: something is left undone.
                code = 1
        txn.commit(_message(ctx, plan, writes, verdict, rehearsal, local), tag="patched")
    if _bytecode_left(ctx, sorted(writes)):
        code = 1
    return Patched(Outcome(text.patched(ctx.who, plan.version, _summary(plan), verdict),
                           {**base, "changed": True, "verify": verdict}, code), whole)


def rehearsal_trailers(rehearsal: Rehearsal | None, why_not: str | None) -> dict[str, str]:
    """The rehearsal's outcome, model and topology as the overlay commit records them (a patched
    wheel's METADATA says them again)."""
    if rehearsal is None:
        return {"Rehearsal": f"not run ({why_not})" if why_not else "not run"}
    a = rehearsal.answer
    how = {"folder": "built from the config given with --model", "arch": "the --arch preset"}.get(
        str(a.model), "the default tiny model; --model rehearses another architecture")
    out = {"Rehearsal": rehearsal.outcome}
    if a.architecture:
        out["Rehearsal-Model"] = f"a tiny {a.architecture} ({how})"
        tp, pp = (a.topology.tensor_parallel_size, a.topology.pipeline_parallel_size) if a.topology else (1, 1)
        out["Rehearsal-Topology"] = (f"tensor parallel size {tp}, pipeline parallel {pp}"
                                     + ("" if tp * pp > 1 else ": one worker, rank logic beyond rank 0 not rehearsed"))
    return out


def _reviewed_plan(ctx: Context, originals: dict[str, bytes], review: Review | None) -> Plan:
    """The plan, each of its hunks reviewed (`-i`). A decline can make another rule's edit
    needed (declining worker-capture-hooks leaves _patched_forward bound, and the edit of its body
    that was not needed is needed again): the plan made with the declines is reviewed again, its
    hunks no review has shown, until none is left. Nothing is written that was not shown."""
    plan = ctx.plan(originals)
    if review is None or not plan.changed:
        return plan
    from ..report.apply import review_again
    from ..report.diff import hunks

    shown: set[tuple[str, int, str]] = set()  # the edited sites of the hunks shown
    texts: set[tuple[str, str]] = set()  # and the hunks themselves (one may carry no site)
    declined: set[tuple[str, int, str]] = set()
    while True:
        new = [h for r in plan.changed for h in hunks(r)
               if (h.path, h.text) not in texts and not (h.keys and h.keys <= shown)]
        if not new:
            return plan
        if texts:
            ctx.log(review_again(len(new)))
        shown |= {k for h in new for k in h.keys}
        texts |= {(h.path, h.text) for h in new}
        more = review(new)
        if not more:
            return plan
        declined |= more
        plan = ctx.plan(originals, declined=frozenset(declined))


def _report_plan(ctx: Context, plan: Plan) -> None:
    from ..report.plan import note_lines, site_lines

    for line in [*note_lines(plan), *site_lines(plan)]:
        ctx.log(line)


def _summary(plan: Plan) -> str:
    from ..report.plan import summary

    return summary(plan)


def _skipped_unrecorded(ctx: Context) -> bool:
    """Say which files the rules would act on that RECORD does not list (apply edits none of them)."""
    from ..report.check import unrecorded_note

    skipped = unrecorded_with_rules(ctx)
    if skipped:
        ctx.log(unrecorded_note(skipped, ctx.target.package))
    return bool(skipped)


def _bytecode_left(ctx: Context, written: list[str]) -> bool:
    """Say which stale bytecode could not be deleted; True if Python would run one of them."""
    from ..analysis.bytecode import beside
    from ..report.check import leftover_line

    left = beside(ctx.target.location, written)
    for b in left:
        ctx.log(leftover_line(b.path, b.runs_instead))
    return any(b.runs_instead for b in left)


def _nothing_to_do(ctx: Context, plan: Plan, base: dict[str, Any], code: int) -> Outcome:
    refused = [x for x in plan.sites if x.action is Action.DECLINED]
    if refused:
        return Outcome(text.declined(len(refused)),
                       {**base, "changed": False, "declined": len(refused)}, code)
    return Outcome(text.already(ctx.who, plan.version, _summary(plan)),
                   {**base, "changed": False}, code)


def _verify(ctx: Context, txn: Transaction, plan: Plan, writes: dict[str, bytes],
            base: dict[str, Any], rehearse: bool) -> tuple[Outcome | None, str, bool, dict[str, str]]:
    """(a failure outcome after restoring, or None; the verdict for the commit; whether the
    rehearsal could not run where vLLM is installed and it was not turned off; the rehearsal's
    trailers)."""
    from ..analysis.rehearse import interpret, model_request, refusal, request, topology
    from ..analysis.verify import verify_plan
    from ..report.rehearse import headline, lines

    refused = refusal(ctx.target)
    why_not = ("--no-rehearse" if not rehearse else refused[0] if refused else None)
    # Only a target without vLLM (a sandbox read with --vllm-source) has nothing to rehearse on.
    unrehearsable = rehearse and refused is not None and ctx.target.vllm_location is not None
    model = model_request(ctx.settings.model, ctx.settings.arch)
    world = topology(ctx.settings.tensor_parallel_size, ctx.settings.pipeline_parallel_size, model, ctx.target)
    try:
        result = verify_plan(ctx.target, plan, ctx.vllm.bindings, live=ctx.vllm.live,
                             rehearse=request(verbose=ctx.settings.verbose > 0, model=model, topology=world)
                             if why_not is None else None)
        rehearsal = None
        if result.ok and result.rehearsal is not None:
            rehearsal = interpret(result.rehearsal, None)
            if rehearsal.failed:
                # Which loaded rule matches the failing site, on the files as now written.
                declined = frozenset(s.rule_id for s in plan.sites if s.action is Action.DECLINED)
                skipped = frozenset(ctx.rules.skipped)
                rehearsal = interpret(result.rehearsal, ctx.plan({**ctx.files.originals(), **writes}, everything=bool(skipped)),
                                      declined, skipped, ctx.rules.full.rules, ctx.settings.rule_options)
    except BaseException:
        # Verification could not run (or was interrupted): leave nothing half-done behind.
        txn.restore()
        raise
    # Every binding with -v; otherwise the imports and the calls that do not bind (the summary counts the rest).
    for line in result.lines if ctx.settings.verbose else result.notable:
        ctx.log(line)
    if rehearsal is not None:
        for line in [headline(rehearsal), *lines(rehearsal, verbose=ctx.settings.verbose > 0)]:
            ctx.log(line)
    if not result.ok or (rehearsal is not None and rehearsal.failed):
        restored = txn.restore()
        reason = result.reason if not result.ok or rehearsal is None else headline(rehearsal)
        data = {**result.data, **({"rehearsal": rehearsal.as_dict()} if rehearsal else {})}
        return Outcome(
            text.verification_failed(reason, len(restored)),
            {**base, "changed": False, "verify": data}, 1,
        ), "", False, {}
    checkpoint("apply:verified")
    if unrehearsable:
        return (None, text.verdict(result.summary, text.could_not_rehearse(why_not or ""), None), True,
                {"Rehearsal": f"could not run ({why_not})"})
    unrehearsed = rehearsal is not None and not rehearsal.passed
    return (None, text.verdict(result.summary, None if rehearsal is None else headline(rehearsal), why_not),
            unrehearsed, rehearsal_trailers(rehearsal, why_not))


def _message(ctx: Context, plan: Plan, writes: dict[str, bytes], verdict: str, rehearsal: dict[str, str],
             local: list[str] | None) -> str:
    """The overlay commit's message: what was patched, for which vLLM, how it was checked."""
    from ..overlay.transaction import Transaction

    target, kind = ctx.target, plan.signature_kind
    guard = f"guarded by {kind} signatures" if kind else "unguarded"
    installed = f"installed {target.vllm_version}" if target.vllm_version else "no vLLM installed"
    skipped = ctx.rules.skipped
    options = sorted(ctx.settings.rule_options)
    flags = ", ".join(f"--{o}" for o in options)
    return Transaction.message(
        "patch",
        f"patch {ctx.who} for vLLM {plan.version} ({guard}{'; skipped: ' + ', '.join(skipped) if skipped else ''}"
        f"{'; with ' + flags if options else ''})",
        [f"Rules: {', '.join(plan.rule_ids) or '(none: back to original bytes)'}",
         *([f"Skipped: {', '.join(skipped)} (--skip/--only)"] if skipped else []),
         *([f"Options: {flags}"] if options else []),
         f"Files: {', '.join(sorted(writes))}",
         # The rules planned from the user's edits: the diff from `local` to this commit is the rules' alone.
         *([f"On top of: local (hand edits not by this tool to {', '.join(local)})"] if local else [])],
        {"Package": ctx.who, "Vllm": f"{plan.version} ({installed})", "Guard": str(kind or "unguarded"),
         "Rules": ",".join(plan.rule_ids), **({"Skipped": ",".join(skipped)} if skipped else {}),
         **({"Options": ",".join(options)} if options else {}), "Verify": verdict, **rehearsal},
    )

"""`rehearse`: run speculators' generator against the installed vLLM on CPU, as installed now."""

from __future__ import annotations

from ..options import RehearseOptions
from .context import Context, Outcome


def rehearse(ctx: Context, opts: RehearseOptions) -> Outcome:
    """Pass (exit 0), the first failure with the rule that fixes it (1), or why it cannot run (2)."""
    from ..analysis.handoff import CANNOT, ERROR, Answer
    from ..analysis.rehearse import TIMEOUT, check_can_run, interpret, model_request, request, topology
    from ..analysis.session import run_session
    from ..report.apply import rehearsed
    from ..report.rehearse import headline, lines

    model = model_request(ctx.settings.model, ctx.settings.arch, ctx.log)
    target = ctx.target
    check_can_run(target)
    world = topology(ctx.settings.tensor_parallel_size, ctx.settings.pipeline_parallel_size, model, target)
    verbose = ctx.settings.verbose > 0
    answer = run_session(target, rehearse=request(verbose=verbose, timeout=opts.timeout or TIMEOUT,
                                                  quick=opts.quick, model=model,
                                                  installed=target.version, topology=world)).rehearsal
    if answer is None:
        answer = Answer(False, ERROR, failure={"exception": "the target gave no rehearsal answer"})
    result = interpret(answer, None)
    if result.failed or answer.outcome == CANNOT:  # a rule may name what it could not run
        skipped = frozenset(ctx.rules.skipped)
        result = interpret(answer, ctx.plan(ctx.files.installed(), everything=bool(skipped)), skipped=skipped,
                           rules=ctx.rules.full.rules, options=ctx.settings.rule_options)
    code = 0 if result.passed else 1 if result.failed else 2
    text = rehearsed(lines(result, verbose=verbose), ctx.who, target.vllm_version, headline(result))
    data = {"ok": result.passed, "package": ctx.who, "vllm": target.vllm_version, **result.as_dict()}
    if code == 2:
        # Exit 2 under --json always carries `error` and `kind` (README: exit codes).
        data.update(error=text.splitlines()[-1], kind=_KINDS.get(answer.outcome, "RehearsalError"))
    return Outcome(text, data, code)


# The `kind` of a rehearsal that could not give a verdict, by its outcome.
_KINDS = {"timeout": "RehearsalTimeout", "cannot_rehearse": "CannotRehearse", "no_model_class": "NoModelClass",
          "error": "RehearsalError"}

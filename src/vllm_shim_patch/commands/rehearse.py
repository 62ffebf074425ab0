"""`rehearse`: run speculators' generator against the installed vLLM on CPU, as installed now."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..options import RehearseOptions
from .context import Context, Outcome

if TYPE_CHECKING:
    from ..analysis.handoff import Answer
    from ..analysis.rehearse import Rehearsal


def rehearse(ctx: Context, opts: RehearseOptions) -> Outcome:
    """Pass (exit 0), the first failure with the rule that fixes it (1), or why it cannot run (2)."""
    from ..analysis.engine import check_options
    from ..analysis.handoff import CANNOT, ERROR, Answer
    from ..analysis.rehearse import TIMEOUT, check_can_run, interpret, model_request, request, topology
    from ..analysis.session import run_session
    from ..report.rehearse import headline

    settings = ctx.settings
    if check_options(opts.engine, opts.engine_python, model=settings.model, arch=settings.arch,
                     tensor_parallel_size=settings.tensor_parallel_size,
                     pipeline_parallel_size=settings.pipeline_parallel_size):
        return _on_engine(ctx, opts)
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
    return _verdict(ctx, answer, result, headline(result), {})


def _on_engine(ctx: Context, opts: RehearseOptions) -> Outcome:
    """The rehearsal's request run by speculators' own generator on vLLM's real CPU engine, in
    the interpreter --engine-python names, over a copy of the target's installed package."""
    from ..analysis import engine
    from ..analysis.rehearse import TIMEOUT, check_can_run, interpret, request
    from ..report.rehearse import engine_headline

    target = ctx.target
    check_can_run(target)
    assert opts.engine is not None and opts.engine_python is not None  # check_options said so
    found = engine.probe(opts.engine, opts.engine_python, target)
    answer, facts = engine.run(target, found, request(verbose=ctx.settings.verbose > 0,
                                                      timeout=opts.timeout or TIMEOUT, quick=opts.quick,
                                                      installed=target.version))
    result = interpret(answer, None)
    if result.failed:
        skipped = frozenset(ctx.rules.skipped)
        result = interpret(answer, ctx.plan(ctx.files.installed(), everything=bool(skipped)), skipped=skipped,
                           rules=ctx.rules.full.rules, options=ctx.settings.rule_options)
    return _verdict(ctx, answer, result, engine_headline(result, found.vllm),
                    {"engine": {**found.to_json(), **facts}})


def _verdict(ctx: Context, answer: Answer, result: Rehearsal, headline: str, more: dict[str, Any]) -> Outcome:
    """The verdict's lines, JSON and exit code (0 passed, 1 failed, 2 no verdict)."""
    from ..report.apply import rehearsed
    from ..report.rehearse import lines

    target = ctx.target
    code = 0 if result.passed else 1 if result.failed else 2
    text = rehearsed(lines(result, verbose=ctx.settings.verbose > 0), ctx.who, target.vllm_version, headline)
    data = {"ok": result.passed, "package": ctx.who, "vllm": target.vllm_version, **result.as_dict(), **more}
    if code == 2:
        # Exit 2 under --json always carries `error` and `kind` (README: exit codes).
        data.update(error=text.splitlines()[-1], kind=_KINDS.get(answer.outcome, "RehearsalError"))
    return Outcome(text, data, code)


# The `kind` of a rehearsal that could not give a verdict, by its outcome.
_KINDS = {"timeout": "RehearsalTimeout", "cannot_rehearse": "CannotRehearse", "no_model_class": "NoModelClass",
          "error": "RehearsalError"}

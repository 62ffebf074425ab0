"""The run: speculators' generator built and driven through the workload, every result checked
against a forward of its own prompt through the same model."""

import os

from . import device, families, model_folder, releases, workload
from .answer import CannotRehearse, WrongOutput

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
# Largest relative difference from the per-prompt forward that still counts as the same states.
TOLERANCE = 1e-3


def _import(run, req):
    run.stage = "import"
    try:
        import speculators
        import vllm
    except Exception as e:  # noqa: BLE001 - nothing of speculators' own code path ran yet
        raise CannotRehearse(f"{type(e).__name__}: {e}") from None
    import importlib.metadata as md

    try:
        spec_version = md.version("speculators")
    except md.PackageNotFoundError:
        spec_version = getattr(speculators, "__version__", None)
    run.versions["speculators"] = {"version": spec_version, "file": speculators.__file__}
    supported = req.get("supported") or []
    if spec_version not in supported:
        raise CannotRehearse(f"speculators {spec_version} is not supported (supported: {', '.join(supported)})")
    # From here a failure is speculators' own (an import of a vLLM name that moved, say).
    from speculators.data_generation import vllm_hidden_states_generator as gen_mod

    run.versions["vllm"] = {"version": getattr(vllm, "__version__", None)}
    return gen_mod


def run(run, req):
    work = workload.from_request(req)
    family = families.FAMILIES[families.DEFAULT]
    gen_mod = _import(run, req)

    run.stage = "setup"
    adapter, why = releases.select()
    if adapter is None:
        raise CannotRehearse(why)
    run.real[:] = REAL + adapter.REAL + family.REAL
    run.stood_in[:] = ([model_folder.STOOD_IN.format(description=family.DESCRIPTION)] + device.STOOD_IN
                       + adapter.STOOD_IN + family.STOOD_IN + STOOD_IN)
    run.extra["adapter"], run.extra["family"] = adapter.NAME, family.NAME
    device.install()
    parts = family.build()
    S = adapter.build(run, family, parts)
    run.standins = (adapter, S)
    run.stage = "self-check"
    family.self_check(run, parts)
    adapter.self_check(run, S)

    model_dir = os.path.join(run.tmpdir, "model")
    os.mkdir(model_dir)
    config = family.config()
    model_folder.write(model_dir, config)

    adapter.install(S)
    try:
        run.stage = "init"
        run.generator = gen_mod.VllmHiddenStatesGenerator(
            model_path=model_dir, layer_ids=list(work.layers), max_model_len=work.max_model_len,
            gpu_memory_utilization=0.5)
        run.iterations = 0  # count generate()'s forward passes only, not warm-up
        model = adapter.model_of(S)
        worst = 0.0  # max relative difference vs a per-prompt forward of the same model
        for b, call in enumerate(work.calls):
            run.stage = f"generate-{b + 1}"
            prompts = workload.prompts(call, config["vocab_size"])
            results = run.generator.generate(prompts)
            run.stage = f"verify-{b + 1}"
            if len(results) != len(prompts):
                raise WrongOutput(f"{len(results)} results for {len(prompts)} prompts")
            for p, r in zip(prompts, results):
                ref = family.reference_states(model, p, set(work.layers))
                for lid, h in zip(work.layers, r["hidden_states"]):
                    run.captured.setdefault(str(lid), []).append(list(h.shape))
                    if list(h.shape) != list(ref[lid].shape):
                        raise WrongOutput(f"layer {lid}: captured {list(h.shape)}, expected {list(ref[lid].shape)}")
                    scale = float(ref[lid].abs().max()) or 1.0
                    worst = max(worst, float((h.float() - ref[lid]).abs().max()) / scale)
            if worst > TOLERANCE:
                raise WrongOutput(f"captured hidden states differ from a per-prompt forward (relative {worst:.3g})")
        run.extra["max_rel_diff"] = worst
        run.stage = "done"
    finally:
        adapter.restore(S)


def worker_failure(run):
    if run.standins is None:
        return None
    adapter, S = run.standins
    return adapter.worker_failure(S)


def shutdown(run):
    standins, run.standins = run.standins, None
    run.generator = None
    if standins is not None:
        adapter, S = standins
        adapter.shutdown(S)

"""The V2 worker's stand-ins against vLLM's Worker and config, by the names their code uses and
their signatures (never their source text). No vLLM imported here: vLLM's modules are passed in."""

import inspect

from ...selfcheck import code_names


def worker(run, gpu_worker):
    w = gpu_worker.Worker
    names = code_names(w.init_device)
    run.check("RehearsalV2Worker.init_device vs Worker.init_device",
              {"init_worker_distributed_environment", "set_random_seed", "_init_workspace_and_model_runner"} <= names,
              f"Worker.init_device no longer sets up the distributed environment, the seed and the runner: {sorted(names)}")
    run.check("RehearsalV2Worker._make_model_runner vs Worker._make_model_runner",
              "GPUModelRunner" in code_names(w._make_model_runner)
              and list(inspect.signature(w._make_model_runner).parameters) == ["self"],
              "Worker._make_model_runner no longer builds V2's GPUModelRunner from the worker alone")
    names = code_names(w.initialize_from_config)
    run.check("RehearsalV2Worker.initialize_from_config vs Worker.initialize_from_config",
              {"enable_extensible_kv_cache", "initialize_kv_cache"} <= names
              and list(inspect.signature(w.initialize_from_config).parameters) == ["self", "kv_cache_config"],
              "Worker.initialize_from_config no longer chooses its path by enable_extensible_kv_cache")
    real = getattr(w, "extend_kv_cache", None)
    run.check("RehearsalV2Worker.extend_kv_cache vs Worker.extend_kv_cache",
              real is not None and list(inspect.signature(real).parameters) == ["self", "num_blocks"],
              str(inspect.signature(real)) if real is not None else "Worker has no extend_kv_cache")


def resolver(run, vllm_config_cls):
    """The extensible cache's resolver is asked as on CUDA through is_cuda_alike."""
    real = getattr(vllm_config_cls, "_resolve_extensible_kv_cache", None)
    names = code_names(real) if real is not None else set()
    run.check("extensible KV cache resolver vs VllmConfig._resolve_extensible_kv_cache",
              {"is_cuda_alike", "enable_extensible_kv_cache"} <= names,
              "VllmConfig no longer resolves enable_extensible_kv_cache by is_cuda_alike")

"""The platform stand-ins a world of many ranks needs on a machine without a GPU (imports vLLM:
imported only once the adapter fits). Each is put in place on an ExitStack that undoes it.

- worker_cls: a GPU platform's check_and_update_config names vLLM's GPU Worker where the config
  says "auto" (CudaPlatform does); the platform vLLM resolves here leaves "auto". Ours names the
  rehearsal's worker, the GPU Worker with init_device stood in. The executor is vLLM's own.
- supported_dtypes: float32 first. vLLM downcasts a float32 config ("auto") to the platform's
  first dtype, bfloat16, where a row-parallel layer's split contraction moves the states by 1-3%
  from the unsharded model's: past the check's tolerance. In float32 it is about 1e-6.
- torch.compile eager: vLLM compiles helpers that only tensor parallel > 1 reaches
  (VocabParallelEmbedding's get_masked_input_and_mask) with the platform's inductor backend, bound
  at import: a C++ build in every worker process. The same function runs eagerly.
"""

import os

import torch
from vllm.platforms import current_platform
from vllm.platforms.interface import Platform

from ...selfcheck import code_names

# Each stand-in's reason, as the answer reports it: the adapter's STOOD_IN (the face).
DTYPES = (torch.float32, torch.bfloat16, torch.float16)
METHOD = "fork"


def install(undo, worker_qualname):
    """Each stand-in in place, its undo on `undo` (a contextlib.ExitStack)."""
    cls = type(current_platform)
    _set_class(undo, cls, "check_and_update_config", classmethod(_checked(cls.check_and_update_config,
                                                                             worker_qualname)))
    _set_class(undo, cls, "supported_dtypes", property(lambda self: list(DTYPES)))
    import torch._dynamo

    undo.callback(setattr, torch._dynamo.config, "disable", torch._dynamo.config.disable)
    torch._dynamo.config.disable = True
    previous = os.environ.get("VLLM_WORKER_MULTIPROC_METHOD")
    os.environ["VLLM_WORKER_MULTIPROC_METHOD"] = METHOD
    undo.callback(_put_env, "VLLM_WORKER_MULTIPROC_METHOD", previous)


def _checked(real, worker_qualname):
    """The platform's check_and_update_config (bound), then the worker class a GPU platform names."""

    def check_and_update_config(cls, vllm_config):
        real(vllm_config)
        if vllm_config.parallel_config.worker_cls == "auto":
            vllm_config.parallel_config.worker_cls = worker_qualname

    return check_and_update_config


def _set_class(undo, cls, name, value):
    """`cls.name = value`, undone to what the class itself defined (or to inheriting it again)."""
    own = cls.__dict__.get(name, _MISSING)
    setattr(cls, name, value)
    undo.callback(_put_back, cls, name, own)


_MISSING = object()


def _put_back(cls, name, own):
    if own is _MISSING:
        delattr(cls, name)
    else:
        setattr(cls, name, own)


def _put_env(name, value):
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def self_check(run):
    """Each stand-in against what vLLM reads: the config asks the platform, which leaves
    worker_cls "auto"; the dtype comes from supported_dtypes; the compiled helper is dynamo's."""
    from vllm.config import ParallelConfig, VllmConfig
    from vllm.config import model as model_config
    from vllm.model_executor.layers import vocab_parallel_embedding
    from vllm.v1.worker import worker_base

    run.check("platform stand-in check_and_update_config vs VllmConfig.__post_init__",
              "check_and_update_config" in code_names(VllmConfig.__post_init__)
              and ParallelConfig.__dataclass_fields__["worker_cls"].default == "auto",
              "VllmConfig no longer asks the platform, or worker_cls is no longer 'auto' by default")
    run.check("platform stand-in check_and_update_config vs WorkerWrapperBase.init_worker",
              {"worker_cls", "resolve_obj_by_qualname"} <= code_names(worker_base.WorkerWrapperBase.init_worker),
              "init_worker no longer resolves parallel_config.worker_cls by its qualified name")
    resolve = getattr(model_config, "_resolve_auto_dtype", None)
    run.check("platform stand-in supported_dtypes vs Platform.supported_dtypes",
              isinstance(Platform.__dict__.get("supported_dtypes"), property) and resolve is not None
              and "supported_dtypes" in code_names(resolve),
              "dtype 'auto' is no longer resolved from the platform's supported_dtypes")
    helper = getattr(vocab_parallel_embedding, "get_masked_input_and_mask", None)
    run.check("torch.compile stand-in vs get_masked_input_and_mask",
              helper is not None and hasattr(helper, "_torchdynamo_orig_callable"),
              "VocabParallelEmbedding's helper is no longer compiled by torch.compile")

"""The device stand-ins: enough of a CUDA platform for vLLM's configs on a machine without a GPU."""

from typing import Any

import contextlib

STOOD_IN = [
    "current_platform.device_type='cuda' and torch.accelerator.current_accelerator() -> cuda: device "
    "inference (DeviceConfig() raises 'Failed to infer device type' on a machine without a GPU)",
    "torch.cuda.mem_get_info: answers a fixed 2 GiB free / 4 GiB total (no GPU to ask)",
    "current_platform.current_device(): the CPU (a model that places its vision tower there, as Kimi-K2.5's does)",
    "current_platform.manual_seed_all(seed): torch.manual_seed (the CPU generator is the only one); "
    "current_platform.set_device(device): nothing to select (vLLM's base Platform raises NotImplementedError "
    "for both off a GPU platform); current_platform.is_pin_memory_available(): False, and vLLM's PIN_MEMORY "
    "constants with it (pinned host memory needs a CUDA driver)",
    "vllm.device_allocator.get_mem_allocator_instance: a pool that allocates nothing of its own (the "
    "worker's memory-pool context is then a no-op, as on a GPU without the cumem allocator)",
    "vllm.v1.worker.gpu_worker.kernel_warmup: nothing (it JIT-compiles and autotunes GPU kernels, "
    "DeepGEMM, FlashInfer, Triton block tables, and imports modules that need vLLM's CUDA ops; what the "
    "model computes does not depend on it); the warm-up's model run itself is real",
    "vllm's get_cpu_memory (where CacheConfig checks its swap space against the host's memory, up to 0.33): "
    "answers 2 TiB, a GPU node's host memory (the check asks for 4 GiB per tensor parallel rank, which this "
    "machine need not have: vLLM's V1 engine allocates no swap space)",
    "torch.set_num_threads(1): the tiny model's arithmetic is cheaper than thread hand-offs",
    "while the model is built: current_platform.device_type 'cpu' and torch.cuda.current_device() the CPU "
    "(model code that places tensors there at construction: DeepSeek's YaRN rope cache on vLLM 0.12-0.22, "
    "Kimi-K2.5's vision tower on 0.15)",
]


def refuse_platform():
    """The stand-ins make vLLM's configs see a CUDA device: on a CUDA build the platform vLLM
    resolved is CUDA's (a GPU machine) or none (UnspecifiedPlatform, device_type ""). A build for
    another device resolved its own platform, whose checks take only its device (vLLM's
    CpuPlatform.check_and_update_config asserts device_type "cpu"): the rehearsal cannot run there,
    and says so before anything of speculators runs, never as speculators' failure."""
    from vllm.platforms import current_platform

    from .answer import CannotRehearse

    kind = getattr(current_platform, "device_type", "") or ""
    if kind not in ("", "cuda"):
        name = type(current_platform).__name__
        raise CannotRehearse(
            f"the installed vLLM is a {kind.upper()} build ({name}): the rehearsal stands in a CUDA device "
            f"for vLLM's GPU model runner, which {name} refuses (it takes device_type {kind!r} only); rehearse "
            "against vLLM's CUDA build, where speculators runs on the GPU")


def install():
    import torch

    from vllm.platforms import current_platform

    # DeviceConfig() infers the device from current_platform.device_type; without a GPU
    # vLLM resolves UnspecifiedPlatform whose device_type is "" -> "Failed to infer device type".
    current_platform.device_type = "cuda"
    for name, member in platform_members(torch).items():
        setattr(current_platform, name, member)
    _no_pinned_memory()
    _no_sleep_allocator()
    _no_kernel_warmup()
    _node_memory()
    free, total = 2 * 1024**3, 4 * 1024**3
    torch.cuda.mem_get_info = lambda device=None: (free, total)
    # speculators 0.4.0 asks torch.accelerator which device module to query.
    if hasattr(torch, "accelerator"):
        torch.accelerator.current_accelerator = lambda *a, **k: torch.device("cuda")
    torch.cuda.empty_cache = lambda: None
    # The model is tiny: thread start-up and OpenMP spin-waits cost more than the arithmetic, and
    # on a busy machine (CI, a GPU box loading a model) two threads ran RMSNorm 12x slower than one.
    torch.set_num_threads(1)


# At most this many threads once the process computes alone: the model's largest operations
# (a block of attention scores) are a few million numbers.
MOST_THREADS = 4


def threads_for_what_is_idle():
    """The threads this process's torch may use now: 1, or one more per core nothing else is
    running on, read the instant it is asked (/proc/loadavg's runnable count, this process's own
    thread among them; where it cannot be read, 1). Called between generate() calls once the
    forked references are done: two threads on an idle machine nearly halve the attention's time,
    and on a busy one (CI's workers, a GPU box loading a model) OpenMP's spin-waits made two
    threads 12x slower than one. The results do not depend on it: every sum the check reads is
    float64, where another split of its terms moves nothing a bfloat16 row shows."""
    import os

    import torch

    try:
        with open("/proc/loadavg", encoding="ascii") as f:
            running = int(f.read().split()[3].split("/")[0])
        cores = len(os.sched_getaffinity(0))
    except (OSError, ValueError, IndexError, AttributeError):
        running, cores = 1, 1
    n = max(1, min(MOST_THREADS, cores - running + 1))
    if n != torch.get_num_threads():
        torch.set_num_threads(n)
    return n


@contextlib.contextmanager
def building():
    """While the model is built: tensors that model code places on current_platform.device_type
    (DeepSeek's YaRN rope cache, deepseek_v2's self.device) or on torch.cuda.current_device()
    (Kimi-K2.5's vision tower on vLLM 0.15; 0.16+ asks current_platform.current_device()) go to the
    CPU. The configs, made before, keep the "cuda" device they were given."""
    import torch

    from vllm.platforms import current_platform

    device_type, current_platform.device_type = current_platform.device_type, "cpu"
    current_device, torch.cuda.current_device = torch.cuda.current_device, lambda: torch.device("cpu")
    try:
        yield
    finally:
        current_platform.device_type = device_type
        torch.cuda.current_device = current_device


def platform_members(torch):
    """The Platform methods stood in, as the instance attributes that replace them."""
    return {
        "current_device": lambda: torch.device("cpu"),
        "manual_seed_all": lambda seed: torch.manual_seed(seed),
        "set_device": lambda device: None,
        "is_pin_memory_available": lambda: False,
    }


def _no_pinned_memory():
    """vLLM asks once, at import, whether host memory can be pinned (torch_utils.PIN_MEMORY, which
    modules such as gpu_input_batch import by name): answer False there too."""
    import sys

    try:
        from vllm.utils import platform_utils
    except ImportError:
        platform_utils = None
    cached = getattr(platform_utils, "is_pin_memory_available", None)
    if cached is not None and hasattr(cached, "cache_clear"):
        cached.cache_clear()
    try:
        import vllm.utils.torch_utils  # noqa: F401  (so a module importing PIN_MEMORY later reads False)
    except ImportError:
        pass
    for name, module in list(sys.modules.items()):
        if name.startswith("vllm") and isinstance(getattr(module, "PIN_MEMORY", None), bool):
            module.PIN_MEMORY = False  # type: ignore[attr-defined]  # a vLLM module's global, set in place


_REAL: dict[str, Any] = {}


def _no_kernel_warmup():
    try:
        from vllm.v1.worker import gpu_worker
    except ImportError:
        return
    if hasattr(gpu_worker, "kernel_warmup"):
        _REAL.setdefault("kernel_warmup", gpu_worker.kernel_warmup)
        gpu_worker.kernel_warmup = lambda worker, **options: None


# What get_cpu_memory answers: the host memory of a GPU node (8 GPUs, 2 TiB).
NODE_MEMORY = 2 * 1024**4


def _node_memory():
    """CacheConfig.verify_with_parallel_config refuses a swap space (4 GiB a rank by default) over
    70% of the host's memory: at tensor parallel size 8 that is 32 GiB, a GPU node's trifle but more
    than a small machine has. Every vLLM module holding the real get_cpu_memory gets the node's."""
    import importlib
    import sys

    real = None
    # vllm.utils.mem_utils from 0.13; vllm.utils itself before.
    for home in ("vllm.utils.mem_utils", "vllm.utils"):
        try:
            real = getattr(importlib.import_module(home), "get_cpu_memory", None)
        except ImportError:
            continue
        if real is not None:
            break
    if real is None:
        return
    importlib.import_module("vllm.config")  # the modules that ask, imported before they are looked for
    _REAL.setdefault("get_cpu_memory", real)
    for name, module in list(sys.modules.items()):
        if name.startswith("vllm") and getattr(module, "get_cpu_memory", None) is real:
            module.get_cpu_memory = lambda: NODE_MEMORY  # type: ignore[attr-defined]  # vLLM's name, rebound


def self_check(run):
    """Each Platform member stood in exists on vLLM's Platform with the parameters it is given;
    the kernel warm-up stood in takes what the Worker passes it."""
    import inspect

    real = _REAL.get("kernel_warmup")
    if real is not None:
        params = list(inspect.signature(real).parameters.values())
        # 0.33 adds keyword-only options (process_local_only): taken, as nothing is warmed anyway.
        run.check("kernel_warmup stand-in vs kernel_warmup",
                  params[:1] and params[0].name == "worker"
                  and all(p.kind is p.KEYWORD_ONLY for p in params[1:]), str(inspect.signature(real)))

    real = _REAL.get("get_cpu_memory")
    if real is not None:
        run.check("get_cpu_memory stand-in vs get_cpu_memory", not inspect.signature(real).parameters,
                  str(inspect.signature(real)))

    import torch

    from vllm.platforms.interface import Platform

    for name, member in platform_members(torch).items():
        real = getattr(Platform, name, None)
        if real is None:
            continue  # not asked of a platform by this vLLM (0.16 has no manual_seed_all)
        want = [p for p in inspect.signature(real).parameters if p != "cls"]
        ours = list(inspect.signature(member).parameters)
        run.check(f"platform stand-in {name} vs Platform.{name}", want == ours, f"{want} != {ours}")



class NoPoolAllocator:
    """vLLM's MemAllocator protocol with no pool: what the worker's sleep-mode context asks."""

    def use_memory_pool(self, tag=None):
        import contextlib

        return contextlib.nullcontext()

    def sleep(self, offload_tags=None):
        raise RuntimeError("the rehearsal has no sleep mode")

    def discard(self, tags):
        raise RuntimeError("the rehearsal has no sleep mode")

    def wake_up(self, tags=None):
        raise RuntimeError("the rehearsal has no sleep mode")

    def get_current_usage(self):
        return 0


def _no_sleep_allocator():
    """vLLM 0.33's worker takes its memory pool from the platform's sleep-mode allocator, which a
    platform without CUDA has not: every module holding vLLM's lookup gets the no-pool one."""
    import importlib
    import sys

    try:
        allocator = importlib.import_module("vllm.device_allocator")
        importlib.import_module("vllm.v1.worker.gpu_worker")
    except ImportError:
        return
    real = getattr(allocator, "get_mem_allocator_instance", None)
    if real is None:
        return
    instance = NoPoolAllocator()
    for name, module in list(sys.modules.items()):
        if name.startswith("vllm") and getattr(module, "get_mem_allocator_instance", None) is real:
            module.get_mem_allocator_instance = lambda: instance  # type: ignore[attr-defined]  # vLLM's name, rebound

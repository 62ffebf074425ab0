"""The device stand-ins: enough of a CUDA platform for vLLM's configs on a machine without a GPU."""

STOOD_IN = [
    "current_platform.device_type='cuda' and torch.accelerator.current_accelerator() -> cuda: device "
    "inference (DeviceConfig() raises 'Failed to infer device type' on a machine without a GPU)",
    "torch.cuda.mem_get_info: answers a fixed 2 GiB free / 4 GiB total (no GPU to ask)",
    "current_platform.current_device(): the CPU (a model that places its vision tower there, as Kimi-K2.5's does)",
    "torch.set_num_threads(1): the tiny model's arithmetic is cheaper than thread hand-offs",
]


def install():
    import torch

    from vllm.platforms import current_platform

    # DeviceConfig() infers the device from current_platform.device_type; without a GPU
    # vLLM resolves UnspecifiedPlatform whose device_type is "" -> "Failed to infer device type".
    current_platform.device_type = "cuda"
    current_platform.current_device = lambda: torch.device("cpu")
    free, total = 2 * 1024**3, 4 * 1024**3
    torch.cuda.mem_get_info = lambda device=None: (free, total)
    # speculators 0.4.0 asks torch.accelerator which device module to query.
    if hasattr(torch, "accelerator"):
        torch.accelerator.current_accelerator = lambda *a, **k: torch.device("cuda")
    torch.cuda.empty_cache = lambda: None
    # The model is tiny: thread start-up and OpenMP spin-waits cost more than the arithmetic, and
    # on a busy machine (CI, a GPU box loading a model) two threads ran RMSNorm 12x slower than one.
    torch.set_num_threads(1)

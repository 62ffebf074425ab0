"""The CUDA parts Model Runner V2 reaches on its path, stood in on CPU (imports vLLM: imported only
once the adapter fits). Each is put in place on an ExitStack that undoes it; `self_check` holds
each against the real member it replaces (signatures, the attributes the real one sets).

- UvaBuffer: pinned host memory with a device view of it (unified virtual addressing). On CPU the
  device view IS the host tensor: what the runner writes into `.np`/`.cpu` its kernels read.
- CUDA streams and events, torch.cuda.stream/current_stream/set_stream, synchronize: no-ops.
  Everything on CPU runs in program order, so every wait is already satisfied.
- current_platform.get_current_memory_usage: 0 (load_model's DeviceMemoryProfiler asks).
"""

import inspect

import torch
from vllm.platforms import current_platform
from vllm.v1.worker.gpu import buffer_utils

from ...selfcheck import self_attrs

_MISSING = object()


class CpuUvaBuffer:
    """vLLM's UvaBuffer on CPU: the host tensor, its numpy view, and the "device" view (the same
    tensor: there is no device to map it into)."""

    def __init__(self, size, dtype):
        self.cpu = torch.zeros(size, dtype=dtype, device="cpu")
        self.np = self.cpu.numpy()
        self._uva = self.cpu

    def uva(self, n=None):
        return self._uva[:n] if n is not None else self._uva


class NoStream:
    """A CUDA stream or event on CPU: work runs in program order, so recording, waiting and
    synchronising have nothing to do."""

    def __init__(self, *args, **kwargs):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def record(self, stream=None):
        pass

    def record_event(self, event=None):
        return NoStream()

    def wait(self, stream=None):
        pass

    def wait_event(self, event):
        pass

    def wait_stream(self, stream):
        pass

    def synchronize(self):
        pass

    def query(self):
        return True


def _nothing(*args, **kwargs):
    return None


def install(undo):
    """Each stand-in in place, its undo on `undo` (a contextlib.ExitStack)."""
    _set(undo, buffer_utils, "UvaBuffer", CpuUvaBuffer)
    _set(undo, buffer_utils, "is_uva_available", lambda: True)
    for name in ("Stream", "Event"):
        _set(undo, torch.cuda, name, NoStream)
    _set(undo, torch.cuda, "current_stream", lambda device=None: NoStream())
    _set(undo, torch.cuda, "stream", lambda stream=None: NoStream())
    _set(undo, torch.cuda, "set_stream", _nothing)
    _set(undo, torch.cuda, "synchronize", _nothing)
    if hasattr(torch, "accelerator"):
        _set(undo, torch.accelerator, "synchronize", _nothing)
    _set(undo, current_platform, "get_current_memory_usage", lambda device=None: 0.0)


def _set(undo, owner, name, value):
    """`owner.name = value` until `undo` closes, then what `owner` itself held (or nothing of its own)."""
    own = vars(owner).get(name, _MISSING)
    setattr(owner, name, value)
    if own is _MISSING:
        undo.callback(delattr, owner, name)
    else:
        undo.callback(setattr, owner, name, own)


def self_check(run):
    real = buffer_utils.UvaBuffer if buffer_utils.UvaBuffer is not CpuUvaBuffer else None
    if real is None:  # installed already: the class the module defined
        real = vars(buffer_utils).get("UvaBuffer")
    for method in ("__init__", "uva"):
        want, ours = inspect.signature(getattr(real, method)), inspect.signature(getattr(CpuUvaBuffer, method))
        run.check(f"CpuUvaBuffer.{method} vs UvaBuffer.{method}", list(want.parameters) == list(ours.parameters),
                  f"{want} != {ours}")
    sets = self_attrs(real.__init__)
    run.check("CpuUvaBuffer vs the attributes UvaBuffer.__init__ sets", sets == {"cpu", "np", "_uva"}, str(sorted(sets)))
    real_usage = type(current_platform).get_current_memory_usage
    want = [p for p in inspect.signature(real_usage).parameters if p not in ("cls", "self")]
    run.check("get_current_memory_usage stand-in vs Platform.get_current_memory_usage", want == ["device"], str(want))
    for name in ("record", "wait", "wait_stream", "synchronize", "query"):
        theirs = getattr(torch.cuda.Event, name, None) or getattr(torch.cuda.Stream, name, None)
        run.check(f"NoStream.{name} vs torch.cuda.Stream/Event.{name}", theirs is not None,
                  f"torch.cuda has no {name} on streams or events")

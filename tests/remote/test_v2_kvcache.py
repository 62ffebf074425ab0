"""The extensible KV cache's contract as the Model Runner V2 rehearsal enforces it
(`releases/v2_multiproc/kvcache.py`, no vLLM): vLLM 0.34 on CUDA commits only the null block at
initialize_from_config and the rest at extend_kv_cache; a forward that uses a block past the
committed memory fails, naming the rule that fixes it, and counts as speculators' failure."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from vllm_shim_patch._remote.rehearse import frames
from vllm_shim_patch._remote.rehearse.answer import ContractBroken
from vllm_shim_patch._remote.rehearse.releases import v2_multiproc
from vllm_shim_patch._remote.rehearse.releases.v2_multiproc import kvcache

MESSAGE = (
    "KV cache block 5 used past the committed memory: vLLM resolves enable_extensible_kv_cache to True on CUDA, "
    "so initialize_from_config committed 1 of 64 blocks (the null block); the engine core commits the rest by "
    "finalize_extensible_kv_cache and extend_kv_cache, which speculators' generator never calls: on a GPU this "
    "forward reads and writes unbacked memory (rule generator-kv-cache-up-front: "
    "CacheConfig(enable_extensible_kv_cache=False) allocates the KV cache up front)")


def test_an_extensible_cache_backs_the_null_block_only_and_a_block_past_it_fails_naming_the_rule() -> None:
    books = kvcache.Commitments()
    books.initialized(64, extensible=True)
    books.check(0)  # the null block has memory behind it
    with pytest.raises(kvcache.KVCacheNotCommitted) as caught:
        books.check(5)
    assert str(caught.value) == MESSAGE
    assert isinstance(caught.value, ContractBroken)
    assert kvcache.RULE == "generator-kv-cache-up-front"


def test_the_engine_cores_commit_backs_every_block_it_names() -> None:
    books = kvcache.Commitments()
    books.initialized(64, extensible=True)
    books.extended(64)
    books.check(63)
    with pytest.raises(kvcache.KVCacheNotCommitted, match="^KV cache block 64 used past the committed memory: "):
        books.check(64)


@pytest.mark.parametrize("highest", [0, 1, 63])
def test_a_cache_allocated_up_front_backs_every_block(highest: int) -> None:
    books = kvcache.Commitments()
    books.initialized(64, extensible=False)
    books.check(highest)
    assert (books.extensible, books.committed) == (False, None)


class Platform:
    def is_cuda_alike(self) -> bool:
        return False


def test_the_resolver_is_vllms_own_asked_as_on_cuda_for_that_call_only() -> None:
    platform = Platform()
    seen = []

    def real(config: object) -> str:
        seen.append((config, platform.is_cuda_alike()))
        return "resolved"

    resolve = kvcache.resolving_as_cuda(platform, real)
    assert resolve("config") == "resolved"
    assert seen == [("config", True)]
    assert platform.is_cuda_alike() is False and "is_cuda_alike" not in vars(platform)


def test_the_resolver_puts_back_a_platform_answer_of_its_own_even_when_it_raises() -> None:
    platform = Platform()
    own = lambda: False  # noqa: E731
    platform.is_cuda_alike = own  # type: ignore[method-assign]

    def real(config: object) -> None:
        raise ValueError("enable_extensible_kv_cache: unsupported")

    with pytest.raises(ValueError, match="unsupported"):
        kvcache.resolving_as_cuda(platform, real)("config")
    assert vars(platform)["is_cuda_alike"] is own


def test_a_block_past_the_committed_memory_on_the_worker_is_speculators_failure(tmp_path: Path) -> None:
    """Raised by the stand-in (the rehearsal's own file) on the worker, surfaced through vLLM's RPC."""
    books = kvcache.Commitments()
    books.initialized(64, extensible=True)
    try:
        books.check(5)
    except kvcache.KVCacheNotCommitted as e:
        worker = e
    spec, vllm = str(tmp_path / "site" / "speculators"), str(tmp_path / "site" / "vllm")
    surfaced = RuntimeError(f"Worker failed with error '{MESSAGE}'")
    outcome, failure = frames.classify(surfaced, "generate-1", spec, vllm, worker_exc=worker)
    assert outcome == "failed"
    assert failure["exception"] == f"KVCacheNotCommitted: {MESSAGE}"
    assert failure["side"] == "worker" and "stand_in" not in failure


def _vllm_files(root: Path, *files: str) -> None:
    for f in ("vllm/__init__.py", *files):
        (root / f).parent.mkdir(parents=True, exist_ok=True)
        (root / f).write_text("raise ImportError('the files are read, never imported')\n")


@pytest.mark.parametrize(("files", "environment"), [
    (("vllm/v1/worker/gpu/model_runner.py",), {"TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}),
    (("vllm/v1/worker/gpu/model_runner.py", "vllm/v1/worker/gpu_model_runner.py"), {}),
    (("vllm/v1/worker/gpu_model_runner.py",), {}),
], ids=["v2-only", "v2-beside-v1", "v1-only"])
def test_triton_runs_interpreted_only_where_the_installed_files_hold_v2_alone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, files: tuple[str, ...], environment: dict[str, str]) -> None:
    _vllm_files(tmp_path, *files)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "vllm", raising=False)
    assert v2_multiproc.environment() == environment
    assert "vllm" not in sys.modules

"""StaticSignatures on the real vLLM 0.16.0 and 0.17.0 sources, and speculators' calls bound to them.

Slow: the first run downloads each vLLM wheel (~500 MB) and extracts its source (tests/realdata.py).
"""

from __future__ import annotations

import pytest
import realdata
from sigcases import bind_call, render

from vllm_shim_patch.report.binding import bind_reason
from vllm_shim_patch.signatures import Param, Signature, StaticSignatures

# One worker runs the whole module (pytest -n): its module-scoped fixtures are built once.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("real-sources")]


@pytest.fixture(scope="module", params=realdata.VLLM_SOURCES)
def real(request: pytest.FixtureRequest) -> tuple[str, StaticSignatures]:
    return request.param, StaticSignatures(realdata.vllm_source(request.param))


CONFIGS = [
    "SchedulerConfig",
    "CacheConfig",
    "ModelConfig",
    "ParallelConfig",
    "VllmConfig",
    "DeviceConfig",
    "LoadConfig",
]


def _required(sig: Signature) -> list[str]:
    return [p.name for p in sig.params if p.required]


def test_real_get_kv_cache_config_from_groups(real: tuple[str, StaticSignatures]) -> None:
    _, src = real
    sig = src.get("vllm.v1.core.kv_cache_utils.get_kv_cache_config_from_groups")
    assert render(sig) == "vllm_config, kv_cache_groups, available_memory"
    assert not sig.accepts("kv_cache_specs")


def test_real_scheduler_requires_block_size(real: tuple[str, StaticSignatures]) -> None:
    _, src = real
    sig = src.get("vllm.v1.core.sched.scheduler.Scheduler")
    assert render(sig) == (
        "vllm_config, kv_cache_config, structured_output_manager, block_size, "
        "mm_registry=, include_finished_set=, log_stats="
    )
    assert sig.requires("block_size")
    assert sig.origin == "vllm/v1/core/sched/scheduler.py:64"


def test_real_request_eos_token_id(real: tuple[str, StaticSignatures]) -> None:
    version, src = real
    sig = src.get("vllm.v1.request.Request")
    if version == realdata.REFERENCE_VLLM:
        assert sig.requires("eos_token_id")
        assert sig.origin == "vllm/v1/request.py:59"
        assert _required(sig) == [
            "request_id",
            "prompt_token_ids",
            "sampling_params",
            "pooling_params",
            "eos_token_id",
        ]
    else:
        assert not sig.accepts("eos_token_id")
        assert _required(sig) == [
            "request_id",
            "prompt_token_ids",
            "sampling_params",
            "pooling_params",
        ]


def test_real_config_classes(real: tuple[str, StaticSignatures]) -> None:
    _, src = real
    sigs = src.get_many(f"vllm.config.{name}" for name in CONFIGS)
    for name, sig in sigs.items():
        assert sig is not None, (name, src.unknown_reason(name))
        # @config is a pydantic dataclass with extra="forbid": no catch-all keyword.
        assert all(p.kind == "positional_or_keyword" for p in sig.params), name
    sched = sigs["vllm.config.SchedulerConfig"]
    assert sched.origin == "vllm/config/scheduler.py:26"
    for keyword in (
        "max_num_seqs",
        "max_model_len",
        "max_num_batched_tokens",
        "is_encoder_decoder",
    ):
        assert sched.accepts(keyword)
    # InitVar fields with no default are required; ClassVar and Field(init=False) are no parameters.
    assert _required(sched) == ["max_model_len", "is_encoder_decoder"]
    assert not sched.accepts("DEFAULT_MAX_NUM_SEQS") and not sched.accepts(
        "max_num_encoder_input_tokens"
    )
    cache = sigs["vllm.config.CacheConfig"]
    assert cache.accepts("block_size") and cache.accepts("gpu_memory_utilization")
    assert not cache.accepts("num_gpu_blocks")  # field(init=False)
    model = sigs["vllm.config.ModelConfig"]
    for keyword in (
        "model",
        "tokenizer",
        "trust_remote_code",
        "dtype",
        "max_model_len",
        "enforce_eager",
        "limit_mm_per_prompt",
    ):  # the last is an InitVar with a default
        assert model.accepts(keyword)
    assert not model.accepts("hf_config")
    parallel = sigs["vllm.config.ParallelConfig"]
    assert parallel.accepts("tensor_parallel_size") and parallel.accepts("worker_extension_cls")
    assert not parallel.accepts("world_size")
    assert parallel.accepts("_api_process_rank")  # pydantic dataclasses keep underscore fields
    assert render(sigs["vllm.config.DeviceConfig"]) == "device="
    vllm_config = sigs["vllm.config.VllmConfig"]
    for keyword in (
        "model_config",
        "cache_config",
        "parallel_config",
        "scheduler_config",
        "device_config",
        "load_config",
    ):
        assert vllm_config.accepts(keyword)
    for name in CONFIGS:
        if name != "SchedulerConfig":
            assert _required(sigs[f"vllm.config.{name}"]) == [], name


def test_real_other_callables(real: tuple[str, StaticSignatures]) -> None:
    _, src = real
    sampling = src.get("vllm.sampling_params.SamplingParams")  # a msgspec.Struct
    assert sampling.params[:3] == (
        Param("n", "positional_or_keyword", False),
        Param("presence_penalty", "positional_or_keyword", False),
        Param("frequency_penalty", "positional_or_keyword", False),
    )
    assert sampling.accepts("max_tokens") and sampling.accepts("temperature")
    assert _required(sampling) == [] and not sampling.accepts("no_such_option")
    assert (
        render(src.get("vllm.v1.executor.multiproc_executor.MultiprocExecutor"))
        == "vllm_config, monitor_workers="
    )
    assert render(src.get("vllm.v1.structured_output.StructuredOutputManager")) == "vllm_config"
    assert len(src.parsed_modules) < 40


# The calls speculators 0.3.0 makes (vllm_hidden_states_generator.py): (callee, arguments,
# reason on 0.16.0, reason on 0.17.0), "" for a call that binds.
SPECULATORS_CALLS = [
    ("vllm.v1.core.kv_cache_utils.get_kv_cache_config_from_groups",
     "vllm_config=c, kv_cache_groups=g, kv_cache_specs=s, available_memory=m",
     "unexpected keyword argument 'kv_cache_specs'",
     "unexpected keyword argument 'kv_cache_specs'"),
    ("vllm.v1.core.sched.scheduler.Scheduler",
     "vllm_config=c, kv_cache_config=k, structured_output_manager=m",
     "missing required argument 'block_size'", "missing required argument 'block_size'"),
    ("vllm.v1.request.Request",
     ("request_id=r, prompt_token_ids=i, sampling_params=s, pooling_params=None, eos_token_id=e,"
      " arrival_time=t"),
     "", "unexpected keyword argument 'eos_token_id'"),
    # InitVar is_encoder_decoder has no default in 0.16.0 and 0.17.0.
    ("vllm.config.SchedulerConfig", "max_num_seqs=s, max_model_len=m, max_num_batched_tokens=b",
     "missing required argument 'is_encoder_decoder'",
     "missing required argument 'is_encoder_decoder'"),
    ("vllm.config.CacheConfig", "block_size=b, gpu_memory_utilization=g", "", ""),
    ("vllm.config.ModelConfig",
     "model=m, tokenizer=m, trust_remote_code=1, dtype='auto', max_model_len=n, enforce_eager=1",
     "", ""),
    ("vllm.config.ParallelConfig", "tensor_parallel_size=t, worker_extension_cls='x.Y'", "", ""),
    ("vllm.config.VllmConfig",
     ("model_config=m, cache_config=c, parallel_config=p, scheduler_config=s, device_config=d,"
      " load_config=l"),
     "", ""),
    ("vllm.config.DeviceConfig", "", "", ""),
    ("vllm.config.LoadConfig", "", "", ""),
    ("vllm.sampling_params.SamplingParams", "max_tokens=m, temperature=t", "", ""),
    ("vllm.v1.executor.multiproc_executor.MultiprocExecutor", "vllm_config=c", "", ""),
    ("vllm.v1.structured_output.StructuredOutputManager", "vllm_config=c", "", ""),
]  # fmt: skip


def test_real_speculators_calls_bind(real: tuple[str, StaticSignatures]) -> None:
    version, src = real
    got = {q: bind_reason(bind_call(src.get(q), arguments)) for q, arguments, _, _ in SPECULATORS_CALLS}
    column = 2 if version == realdata.REFERENCE_VLLM else 3
    assert got == {row[0]: row[column] for row in SPECULATORS_CALLS}

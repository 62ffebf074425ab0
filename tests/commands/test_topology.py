"""The rehearsal's topology (issue 26): `--tensor-parallel-size N` runs N ranks, one worker process
each, however few the CPUs; not given, what `--model` needs, capped only by this machine's
memory, with the reason in the verdict; a size this machine's memory cannot hold is one line, exit
2, before anything runs; a rank's failure is reported as the rank's. The target session is stood in (its answer is
what `_remote/rehearse/` returns)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from vllm_shim_patch._remote.rehearse.families import FAMILIES
from vllm_shim_patch.analysis import session, topology
from wire import on_the_wire
from vllm_shim_patch.commands.context import Context
from vllm_shim_patch.commands.rehearse import rehearse
from vllm_shim_patch.errors import UsageError
from vllm_shim_patch.options import RehearseOptions
from vllm_shim_patch.settings import Settings
from vllm_shim_patch.target import Target

TARGET = Target(python="/env/bin/python", python_version="3.11.7", package="speculators", version="0.3.0",
                location=Path("/env/site"), record=(), editable=None, vllm_version="0.16.0",
                vllm_location=Path("/env/site/vllm"))
WORKLOAD = {"name": "quick", "calls": 2, "sequences": 4, "tokens": 129, "reorder": []}
PASSED = {"ok": True, "outcome": "passed", "stage": "done", "iterations": 2, "failure": None, "workload": WORKLOAD,
          "steps": {"total": 2, "chunked": 0, "reordered": 0}, "architecture": "LlamaForCausalLM", "model": "default"}
HEAD = ("speculators 0.3.0 on vLLM 0.16.0: rehearsal passed: 2 calls, 4 sequences (129 tokens) match a per-prompt "
        "forward row by row; chunked prefill in 0 of 2 steps; runner order differed from scheduler order in 0 "
        "(--quick: short prompts only, no chunked prefill; run without --quick for speculators' own workload)")
TAIL = "; rehearsed on a tiny LlamaForCausalLM; pass --model to rehearse your model's architecture"


GiB = 1024**3


def _run(monkeypatch: pytest.MonkeyPatch, reply: dict[str, Any], memory: float = 20 * GiB, target: Target = TARGET,
         **settings: Any) -> tuple[Any, list[dict[str, Any]]]:
    asked: list[dict[str, Any]] = []

    def run_session(target: Target, **request: Any) -> session.SessionAnswer:
        asked.append(request["rehearse"].to_json())  # what goes on the wire
        return session.SessionAnswer(None, None, on_the_wire(reply))

    monkeypatch.setattr(session, "run_session", run_session)
    monkeypatch.setattr(topology, "available_memory", lambda: memory)
    monkeypatch.setattr(Context, "plan", lambda self, *a, **k: None)  # no rule to name
    ctx = Context(Settings(python=target.python, **settings))
    ctx.probe._target = target
    return rehearse(ctx, RehearseOptions(quick=True)), asked


def _asked(request: dict[str, Any]) -> tuple[int, int, str | None]:
    return request["tensor_parallel_size"], request["pipeline_parallel_size"], request["topology_reason"]


def test_by_default_one_rank_and_the_verdict_says_nothing_of_ranks(monkeypatch: pytest.MonkeyPatch) -> None:
    out, asked = _run(monkeypatch, {**PASSED, "topology": {"tensor_parallel_size": 1, "pipeline_parallel_size": 1,
                                                           "reason": None}})
    assert _asked(asked[0]) == (1, 1, None)
    assert (out.exit_code, out.text) == (0, HEAD + TAIL)


def test_the_size_given_is_what_runs_and_the_verdict_names_the_topology(monkeypatch: pytest.MonkeyPatch) -> None:
    world = {"tensor_parallel_size": 2, "pipeline_parallel_size": 1, "reason": None, "world_size": 2,
             "output_rank": 0, "workers": "2 worker processes (fork)", "dtype": "float32"}
    out, asked = _run(monkeypatch, {**PASSED, "topology": world}, tensor_parallel_size=2)
    assert _asked(asked[0]) == (2, 1, None)
    assert (out.exit_code, out.text) == (0, HEAD + "; at tensor parallel size 2, pipeline parallel 1" + TAIL)


def test_ranks_beyond_the_cpus_run_where_the_memory_holds_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """Kimi-K2.5's own size: 8 worker processes on this 2-CPU machine (the tiny model is widened
    for them), 16 and 64 beyond one node; only memory limits."""
    for size in (8, 16, 64):
        _, asked = _run(monkeypatch, PASSED, memory=40 * GiB, tensor_parallel_size=size)
        assert _asked(asked[0]) == (size, 1, None)


@pytest.mark.parametrize(("size", "memory", "message"), [
    (8, 4 * GiB, "--tensor-parallel-size 8: the rehearsal runs one worker process per rank, each needing about "
                 "0.54 GiB of memory, and this machine has 4.0 GiB available (at most --tensor-parallel-size 7)"),
    (2, 0.5 * GiB, "--tensor-parallel-size 2: the rehearsal runs one worker process per rank, each needing about "
                   "0.54 GiB of memory, and this machine has 0.5 GiB available (at most --tensor-parallel-size 1)"),
    (65, 1000 * GiB, "--tensor-parallel-size 65: the rehearsal runs one worker process per rank, each needing about "
                     "0.54 GiB of memory, and this machine has 1000.0 GiB available (at most --tensor-parallel-size 64)"),
])
def test_a_size_the_memory_cannot_hold_is_refused_before_the_target_is_asked(
        monkeypatch: pytest.MonkeyPatch, size: int, memory: float, message: str) -> None:
    with pytest.raises(UsageError) as e:
        _run(monkeypatch, PASSED, memory=memory, tensor_parallel_size=size)
    assert str(e.value) == message


def test_the_available_memory_is_the_machine_s_own() -> None:
    """Read from /proc/meminfo's MemAvailable, as `free` reports it (the independent reference)."""
    import subprocess

    free = subprocess.run(["free", "-b"], capture_output=True, text=True, check=True).stdout.splitlines()
    available = float(free[1].split()[6])
    got = topology.available_memory()
    assert got is not None and abs(got - available) < 0.05 * available  # the two reads are moments apart


GENERATOR_WITH_PP = '''
class VllmHiddenStatesGenerator:
    def __init__(self, model_path, layer_ids=None, tensor_parallel_size=1, pipeline_parallel_size=1):
        pass
'''


def test_pipeline_stages_are_refused_saying_who_cannot_take_them(monkeypatch: pytest.MonkeyPatch,
                                                                 tmp_path: Path) -> None:
    with pytest.raises(UsageError) as e:
        _run(monkeypatch, PASSED, pipeline_parallel_size=2)
    assert str(e.value) == ("--pipeline-parallel-size 2: speculators 0.3.0's VllmHiddenStatesGenerator takes no "
                            "pipeline_parallel_size (its executor runs tensor parallel ranks only): rehearse with "
                            "--tensor-parallel-size")
    gen = tmp_path / topology.GENERATOR
    gen.parent.mkdir(parents=True)
    gen.write_text(GENERATOR_WITH_PP)
    takes = Target(**{**TARGET.__dict__, "location": tmp_path})
    with pytest.raises(UsageError) as e:
        _run(monkeypatch, PASSED, target=takes, pipeline_parallel_size=2)
    assert str(e.value) == ("--pipeline-parallel-size 2: the rehearsal's stand-in model runner runs no pipeline "
                            "stages (vLLM's runner would hand IntermediateTensors from stage to stage): rehearse "
                            "with --tensor-parallel-size")
    _, asked = _run(monkeypatch, PASSED, pipeline_parallel_size=1)  # one stage: no pipeline, runs
    assert _asked(asked[0]) == (1, 1, None)


def _model(tmp_path: Path, family: str, index_bytes: float | None = None) -> Path:
    folder = tmp_path / family
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(FAMILIES[family].PRESET))
    if index_bytes is not None:
        (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": index_bytes}}))
    return folder


@pytest.mark.parametrize(("family", "index", "memory", "expected"), [
    ("llama", None, 20 * GiB, (1, None)),  # 8B in bfloat16: one GPU
    # Its real size, 8 processes on this 2-CPU machine.
    ("deepseek", None, 20 * GiB, (8, "your model's weights, about 1,405 GB, need tensor parallel size 8 or more on "
                                     "80 GB GPUs")),
    ("kimi-k2.5", None, 20 * GiB, (8, "your model's weights, about 2,083 GB, need tensor parallel size 8 or more on "
                                 "80 GB GPUs")),
    ("llama", 200e9, 20 * GiB, (4, "your model's weights, about 200 GB, need tensor parallel size 4 on 80 GB GPUs")),
    # 3.2 GiB hold 5 processes: the largest power of two below, as a model's GPUs come.
    ("deepseek", None, 3.2 * GiB, (4, "your model's weights, about 1,405 GB, need tensor parallel size 8 or more on "
                                      "80 GB GPUs; this machine's 3.2 GiB of available memory runs 4")),
    ("llama", 200e9, 0.5 * GiB, (1, "your model's weights, about 200 GB, need tensor parallel size 4 on 80 GB GPUs; "
                                    "this machine's 0.5 GiB of available memory runs one worker process: rehearsed "
                                    "at 1, where no rank logic is tested")),
])
def test_by_default_the_size_the_model_needs_capped_by_this_machine_with_the_reason(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, family: str, index: float | None, memory: float,
        expected: tuple[int, str | None]) -> None:
    folder = _model(tmp_path, family, index)
    _, asked = _run(monkeypatch, PASSED, memory=memory, model=str(folder))
    assert _asked(asked[0]) == (expected[0], 1, expected[1])
    _, asked = _run(monkeypatch, PASSED, memory=memory, model=str(folder), tensor_parallel_size=1)
    assert _asked(asked[0]) == (1, 1, None)  # given: what runs, no reason to give


def test_the_reason_for_the_size_is_in_the_verdict(monkeypatch: pytest.MonkeyPatch) -> None:
    why = ("your model's weights, about 1,405 GB, need tensor parallel size 8 or more on 80 GB GPUs; this machine's "
           "3.2 GiB of available memory runs 4")
    out, _ = _run(monkeypatch, {**PASSED, "topology": {"tensor_parallel_size": 4, "pipeline_parallel_size": 1,
                                                       "reason": why}})
    assert out.text == HEAD + f"; at tensor parallel size 4, pipeline parallel 1 ({why})" + TAIL


WORLD = {"tensor_parallel_size": 2, "pipeline_parallel_size": 1, "reason": None}
HOOK = {"file": "speculators/data_generation/custom_worker.py", "line": 100, "function": "hook",
        "code": 'raise RuntimeError("rank 1 raises in its capture hook")'}


def _failed(failure: dict[str, Any], stage: str = "generate-1") -> dict[str, Any]:
    return {"ok": False, "outcome": "failed", "stage": stage, "iterations": 0, "failure": failure, "topology": WORLD,
            "architecture": "LlamaForCausalLM", "model": "default"}


def test_a_rank_s_failure_names_the_rank_its_frame_how_it_surfaced_and_that_no_rule_fixes_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    failure = {"exception": "RuntimeError: rank 1 raises in its capture hook", "speculators_frame": HOOK,
               "vllm_frame": {"file": "vllm/model_executor/models/llama.py", "line": 426, "code": "x = layer("},
               "side": "worker", "rank": 1, "tp_rank": 1, "pp_rank": 0,
               "surfaced_as": {"exception": "RuntimeError: cancelled", "side": "main"}}
    out, _ = _run(monkeypatch, _failed(failure, "init"))
    assert out.exit_code == 1
    assert out.text.splitlines() == [
        "  exception:   RuntimeError: rank 1 raises in its capture hook",
        f"  speculators: {HOOK['file']}:100: {HOOK['code']}",
        "  vLLM:        vllm/model_executor/models/llama.py:426: x = layer( (in the worker)",
        "  rank:        1 (tensor parallel rank 1, pipeline rank 0)",
        "  surfaced as: RuntimeError: cancelled",
        "  fix:         no rule: speculators' own rank logic",
        f"speculators 0.3.0 on vLLM 0.16.0: rehearsal failed in init on rank 1 at {HOOK['file']}:100: RuntimeError: "
        f"rank 1 raises in its capture hook; at tensor parallel size 2, pipeline parallel 1{TAIL}",
    ]


def test_a_dead_worker_is_a_failure_with_its_exit_status(monkeypatch: pytest.MonkeyPatch) -> None:
    failure = {"exception": "worker rank 1 (VllmWorker-1) died with exit status 7", "rank": 1, "exit_status": 7,
               "side": "worker", "speculators_frame": None, "vllm_frame": None,
               "surfaced_as": {"exception": "RuntimeError: cancelled"}}
    out, _ = _run(monkeypatch, _failed(failure, "generate-2"))
    assert out.exit_code == 1
    assert "  rank:        1" in out.text.splitlines()
    assert out.text.splitlines()[-1] == (
        "speculators 0.3.0 on vLLM 0.16.0: rehearsal failed in generate-2 on rank 1: worker rank 1 (VllmWorker-1) "
        f"died with exit status 7; at tensor parallel size 2, pipeline parallel 1{TAIL}")


def test_what_every_rank_raised_is_no_one_rank_s(monkeypatch: pytest.MonkeyPatch) -> None:
    failure = {"exception": "ValueError: Model X does not support hidden state extraction", "speculators_frame": HOOK,
               "vllm_frame": None, "side": "worker", "rank": 0, "tp_rank": 0, "pp_rank": 0, "every_rank": True}
    out, _ = _run(monkeypatch, _failed(failure, "init"))
    assert "  rank:        every rank raised it; rank 0 first" in out.text.splitlines()
    assert not any("speculators' own rank logic" in line for line in out.text.splitlines())
    assert out.text.splitlines()[-1].startswith("speculators 0.3.0 on vLLM 0.16.0: rehearsal failed in init at ")


def test_states_captured_on_another_rank_than_rank_0_are_speculators_rank_logic(
        monkeypatch: pytest.MonkeyPatch) -> None:
    failure = {"exception": "RuntimeError: Failed to capture hidden states from worker", "side": "main",
               "speculators_frame": {**HOOK, "line": 295}, "vllm_frame": None, "captured_on": [1],
               "ranks": ["rank 0 replied no captured states", "rank 1 replied 2 sequences (58 rows)"]}
    out, _ = _run(monkeypatch, _failed(failure))
    assert out.text.splitlines()[3:5] == [
        "  ranks:       rank 0 replied no captured states; rank 1 replied 2 sequences (58 rows)",
        "  fix:         no rule: speculators' own rank logic (rank 1 captured the states, tensor parallel rank 0 none)"]


def test_states_rank_0_captured_that_the_generator_did_not_get_are_speculators_rank_logic(
        monkeypatch: pytest.MonkeyPatch) -> None:
    failure = {"exception": "RuntimeError: Failed to capture hidden states from worker", "side": "main",
               "speculators_frame": {**HOOK, "line": 292}, "vllm_frame": None, "captured_on": [],
               "rank0_captured": True,
               "ranks": ["rank 0 replied 2 sequences (58 rows)", "rank 1 replied no captured states"]}
    out, _ = _run(monkeypatch, _failed(failure))
    assert out.text.splitlines()[3:5] == [
        "  ranks:       rank 0 replied 2 sequences (58 rows); rank 1 replied no captured states",
        "  fix:         no rule: speculators' own rank logic (tensor parallel rank 0 captured the states; "
        "speculators' read of the capture did not take rank 0's reply alone)"]


@pytest.mark.parametrize("broken", [
    {"num_attention_heads": 0},  # no heads to divide by
    {"qk_nope_head_dim": None, "qk_rope_head_dim": None, "num_attention_heads": "many"},
    {"n_routed_experts": "sixty"},
    {"hidden_size": None},
], ids=["no-heads", "not-a-number", "experts-not-a-number", "no-hidden-size"])
def test_a_config_whose_sizes_are_broken_has_no_estimate_not_a_traceback(broken: dict[str, object]) -> None:
    from vllm_shim_patch.analysis.topology import estimate_bytes

    config = {"hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 128, "num_attention_heads": 4}
    assert estimate_bytes(config) == (2 * (2 * 64 * 4 * 16 * 2) + 2 * 3 * 64 * 256 + 2 * 128 * 64) * 2
    assert estimate_bytes({**config, **broken}) is None

"""The rehearsal's handoff (`_remote/rehearse/handoff/`): the request and the answer cross the
process boundary as JSON that each side builds and reads only through the typed values. The JSON
of an answer is part of `--json`: it must read back byte for byte, keys in the order the target
wrote them; a malformed one is one line naming the field."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from vllm_shim_patch._remote.rehearse import answer, handoff
from vllm_shim_patch._remote.rehearse.answer import Result, Run, Setup
from vllm_shim_patch.analysis import handoff as tool_side
from vllm_shim_patch.analysis.rehearse import request
from vllm_shim_patch.analysis.session import _rehearsal
from vllm_shim_patch.errors import VerifyError

GEN = "speculators/data_generation/vllm_hidden_states_generator.py"
# A failed run's answer as the target wrote it before the handoff was typed (run.extra's keys in
# the order run.py filled them, `versions` last): written out by hand, the reference.
FAILED_WIRE = (
    '{"ok": false, "outcome": "failed", "stage": "verify-2", "iterations": 7, '
    '"captured": {"1": [[58, 64], [71, 64]], "2": [[58, 64], [71, 64]]}, '
    '"failure": {"exception": "WrongOutput: 1 of 4 sequences wrong", "speculators_frame": {"file": "' + GEN + '", '
    '"line": 263, "code": "x", "function": "generate"}, "vllm_frame": null, "raised_frame": null, '
    '"raised_in": "own", "side": "main"}, "real": ["vllm.config: ModelConfig"], "stood_in": ["the device"], '
    '"checks": [{"check": "a vs b", "ok": true}], "seconds": 12.5, "adapter": "v1-multiproc", '
    '"runner": "Model Runner V1", "family": "llama", "architecture": "LlamaForCausalLM", "model": "default", '
    '"topology": {"tensor_parallel_size": 2, "pipeline_parallel_size": 1, "reason": null, "world_size": 2, '
    '"output_rank": 0, "workers": "2 worker processes (fork)", "dtype": "float32"}, '
    '"layers": {"Attention": 4}, "sensitivity": 3.25, "max_rel_diff": 0.5, '
    '"workload": {"name": "quick", "calls": 2, "sequences": 4, "tokens": 129, "reorder": []}, '
    '"steps": {"total": 4, "chunked": 0, "reordered": 1}, '
    '"wrong": [{"call": 2, "sequences": 2, "problems": [{"prompt": 1, "expected": 18, "rows": 17, '
    '"segments": [[1, 1, 17]], "input_ids_of": 1}], "stale_requests": 0, "worker_holds": ["_captured_states"]}], '
    '"data_frames": [{"file": "' + GEN + '", "line": 250, "end_line": 280, "function": "generate"}], '
    '"versions": {"speculators": {"version": "0.3.0", "file": "/site/speculators/__init__.py"}, '
    '"vllm": {"version": "0.16.0"}}}')


def test_an_answer_reads_back_byte_for_byte_on_both_sides() -> None:
    for side in (handoff, tool_side):
        assert json.dumps(side.Answer.from_json(json.loads(FAILED_WIRE)).to_json()) == FAILED_WIRE


def test_the_target_builds_that_answer_from_its_run_keys_in_the_same_order() -> None:
    data = json.loads(FAILED_WIRE)
    run = Run(t0=0.0, stage="verify-2", iterations=7, captured=data["captured"],
              checks=[handoff.Check("a vs b", True)], real=["vllm.config: ModelConfig"], stood_in=["the device"])
    run.setup = Setup("v1-multiproc", "Model Runner V1", "llama", "LlamaForCausalLM", "default",
                      handoff.Topology(2, 1))
    run.setup.topology = run.setup.topology.built({
        "tensor_parallel_size": 2, "pipeline_parallel_size": 1, "world_size": 2, "output_rank": 0,
        "workers": "2 worker processes (fork)", "dtype": "float32"})
    run.layers, run.sensitivity = {"Attention": 4}, 3.25
    work = handoff.Workload.of("quick", 512, (((37, 21), None), ((53, 18), None)))
    run.result = Result(0.5, handoff.WorkloadDone.of(work), handoff.Steps(4, 0, 1))
    run.wrong = (handoff.WrongCall(2, 2, tuple(data["wrong"][0]["problems"]), 0, ("_captured_states",)),)
    run.data_frames = (handoff.CodeSpan(GEN, 250, 280, "generate"),)
    run.versions = handoff.Versions(handoff.Installed("0.3.0", "/site/speculators/__init__.py"),
                                    handoff.Installed("0.16.0"))
    built = answer.finished(answer.answer(run, False, handoff.FAILED, data["failure"]), run).to_json()
    assert list(built) == list(data)
    assert {**built, "seconds": 12.5} == data


def test_an_answer_has_only_what_the_run_got_to() -> None:
    run = Run()
    run.stage = "init"
    assert list(answer.timed_out(run, 5).to_json()) == [
        "ok", "outcome", "stage", "iterations", "captured", "failure", "real", "stood_in", "checks", "seconds"]
    assert answer.finished(answer.answer(run, False, handoff.CANNOT, {"exception": "x"}), run).to_json()[
        "versions"] == {"speculators": None, "vllm": None}


def _wire(**changes: Any) -> dict[str, Any]:
    data = json.loads(FAILED_WIRE)
    data.update(changes)
    return {k: v for k, v in data.items() if v != "DROP"}


@pytest.mark.parametrize(("data", "message"), [
    (_wire(outcome="DROP"), "rehearsal answer: no 'outcome'"),
    (_wire(iterations="7"), "rehearsal answer: 'iterations' is '7', not int"),
    (_wire(ok=1), "rehearsal answer: 'ok' is 1, not bool"),
    (_wire(iterations=True), "rehearsal answer: 'iterations' is True, not int"),
    (_wire(outcome="maybe"), "rehearsal answer: unknown outcome 'maybe'"),
    (_wire(crosscheck={}), "rehearsal answer: unknown field 'crosscheck'"),
    (_wire(failure={"side": "main"}), "rehearsal answer: failure: no 'exception'"),
    (_wire(checks=[{"check": "a vs b"}]), "rehearsal answer: checks: no 'ok'"),
    (_wire(steps={"total": 4, "chunked": 0}), "rehearsal answer: steps: no 'reordered'"),
    (_wire(topology={"tensor_parallel_size": 2, "pipeline_parallel_size": 1, "ranks": 2}),
     "rehearsal answer: topology: unknown field 'ranks'"),
    (_wire(captured={"1": [[58, "64"]]}), "rehearsal answer: captured '1': [58, '64'] is not a list of integers"),
    (_wire(real="vllm"), "rehearsal answer: 'real' is 'vllm', not list"),
    (["passed"], "rehearsal answer: ['passed'] is not a JSON object"),
], ids=["missing", "type", "bool-for-int-field", "int-for-bool", "outcome", "unknown-field", "failure",
        "check", "steps", "topology", "captured", "list", "not-an-object"])
def test_a_malformed_answer_is_one_line_naming_the_field(data: Any, message: str) -> None:
    with pytest.raises(handoff.HandoffError) as e:
        handoff.Answer.from_json(data)
    assert str(e.value) == message
    with pytest.raises(VerifyError) as v:
        _rehearsal(data)  # what the tool makes of it
    assert str(v.value) == f"the target's rehearsal answer is malformed: {message}"


def test_the_request_on_the_wire_is_the_one_the_target_reads() -> None:
    sent = request(quick=True, timeout=60.0, model={"arch": "deepseek"},
                   topology=tool_side.Topology(2, 1, "what the model needs"))
    assert sent.to_json() == {
        "timeout": 60.0, "layers": [1, 2], "workload": "quick", "max_model_len": 512,
        "calls": [{"lengths": [37, 21], "seed": 0, "reorder": None}, {"lengths": [53, 18], "seed": 1, "reorder": None}],
        "verbose": False, "supported": ["0.3.0", "0.4.0", "0.4.0.1"], "arch": "deepseek",
        "tensor_parallel_size": 2, "pipeline_parallel_size": 1, "topology_reason": "what the model needs"}
    read = handoff.Request.from_json(json.loads(json.dumps(sent.to_json())))
    assert read.to_json() == sent.to_json()
    assert (read.arch, read.model, read.topology.reason, read.workload.sequences) == (
        "deepseek", None, "what the model needs", 4)


def test_a_request_the_target_cannot_read_is_its_answer_not_a_crash() -> None:
    from vllm_shim_patch.target import REMOTE

    proc = subprocess.run([sys.executable, str(REMOTE / "session.py")], capture_output=True, text=True,
                          input=json.dumps({"rehearse": {"calls": "x"}}))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["rehearse"] == {
        "ok": False, "outcome": "error", "stage": "start", "iterations": 0, "captured": {},
        "failure": {"exception": "rehearsal error: rehearsal request: 'calls' is 'x', not list"}, "real": [],
        "stood_in": [], "checks": [], "seconds": 0.0}


def test_the_tool_reads_the_targets_own_definition_without_importing_the_rehearsal() -> None:
    code = ("import sys, vllm_shim_patch.analysis.rehearse as r\n"
            "h = sys.modules['_vsp_rehearse_handoff']\n"
            "print(h.__file__)\n"
            "print(sorted(m for m in sys.modules if m.startswith('vllm_shim_patch._remote')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    assert Path(out[0]) == Path(handoff.__file__)  # the same file, no copy of it
    assert out[1] == "[]"  # nothing of the rehearsal imported into the tool

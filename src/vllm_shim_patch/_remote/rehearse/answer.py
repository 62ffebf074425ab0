"""The rehearsal's answer: the exceptions that end a run, the state of one run, and the answer
built from it (`handoff.Answer`, the value the tool reads).

Pure: no vLLM, no torch.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any

from .handoff import (CANNOT, ERROR, FAILED, NO_MODEL_CLASS, OUTCOMES, PASSED, TIMEOUT, Answer, Check, CodeSpan,
                      HandoffError, JSONObject, Steps, Topology, Versions, WorkloadDone, WrongCall)

__all__ = ["CANNOT", "ERROR", "FAILED", "NO_MODEL_CLASS", "OUTCOMES", "PASSED", "TIMEOUT", "Answer", "Run",
           "answer", "timed_out"]


class CannotRehearse(Exception):
    """A stand-in no longer matches the vLLM code it replaces (not a speculators failure)."""


class NoModelClass(Exception):
    """vLLM's model registry has no class for the architecture (told before anything is stood in)."""

    def __init__(self, arch: str, first_release: str | None) -> None:
        self.arch, self.first_release = arch, first_release
        super().__init__(f"this vLLM has no model class for {arch} (it cannot load your model, patched or not; "
                         f"first release with it: {first_release})")

    def failure(self) -> JSONObject:
        return {"exception": str(self), "architecture": self.arch, "first_release": self.first_release}


class WrongOutput(Exception):
    """generate() returned, but its hidden states do not match a per-prompt forward pass."""


class RankFailed(Exception):
    """A rank raised and the generator was not told (vLLM read no reply from that rank): the
    rank's own failure is the run's (`releases/v1_engine/ranks.py`)."""


class ContractBroken(Exception):
    """speculators' code broke a contract of vLLM's that holds on a GPU and that a stand-in
    enforces on CPU (raised where the real thing would fail): a failure of speculators, not of the
    stand-in that raises it."""


class Drained(BaseException):
    """Raised by the in-process worker inbox when empty, to leave the real busy loop.

    BaseException on purpose: WorkerProc.worker_busy_loop calls dequeue outside its
    `except Exception` block, so this propagates out of the loop untouched.
    """


@dataclass
class Setup:
    """What the run was set up with: the release adapter, the model runner it rehearses, the
    model family and architecture, how the model was chosen, and the topology."""

    adapter: str
    runner: str
    family: str
    architecture: str
    model: str  # "folder" (--model), "arch" (--arch) or "default"
    topology: Topology


@dataclass
class Result:
    """What the whole workload showed: the largest difference from the per-prompt forward, the
    workload driven, and its steps."""

    max_rel_diff: float
    workload: WorkloadDone
    steps: Steps


@dataclass
class Run:
    """What one rehearsal has learnt so far; the answer is built from it at any point (the
    session's watchdog builds one while the run is still going)."""

    t0: float = field(default_factory=time.monotonic)
    stage: str = "start"
    iterations: int = 0
    captured: dict[str, list[list[int]]] = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)
    real: list[str] = field(default_factory=list)
    stood_in: list[str] = field(default_factory=list)
    tmpdir: str | None = None
    versions: Versions = field(default_factory=Versions)
    setup: Setup | None = None
    layers: dict[str, int] | None = None
    sensitivity: float | None = None
    result: Result | None = None
    wrong: tuple[WrongCall, ...] | None = None
    data_frames: tuple[CodeSpan, ...] | None = None
    # The live objects of the run (stand-ins, generator), released at shutdown.
    standins: tuple[Any, Any] | None = None
    generator: Any = None

    def count_forward(self) -> None:
        """One forward pass of the model over the scheduled tokens (the stand-in runner reports it)."""
        self.iterations += 1

    def check(self, name: str, ok: object, detail: str = "") -> None:
        """Record one self-check; a mismatch means this vLLM cannot be rehearsed as it is."""
        self.checks.append(Check(name, bool(ok), str(detail) if detail and not ok else None))
        if not ok:
            raise CannotRehearse(f"stand-in {name.split(' vs ')[0]} no longer matches vLLM's "
                                 f"{name.split(' vs ')[-1]}: {detail}")


def answer(run: Run, ok: bool, outcome: str, failure: JSONObject | None = None) -> Answer:
    if outcome not in OUTCOMES:
        raise ValueError(f"unknown outcome {outcome!r}")
    ans = Answer(ok, outcome, run.stage, run.iterations, run.captured, failure, tuple(run.real),
                 tuple(run.stood_in), tuple(run.checks), round(time.monotonic() - run.t0, 2), layers=run.layers,
                 sensitivity=run.sensitivity, wrong=run.wrong, data_frames=run.data_frames)
    setup, result = run.setup, run.result
    if setup is not None:
        ans = replace(ans, adapter=setup.adapter, runner=setup.runner, family=setup.family,
                      architecture=setup.architecture, model=setup.model, topology=setup.topology)
    if result is not None:
        ans = replace(ans, max_rel_diff=result.max_rel_diff, workload=result.workload, steps=result.steps)
    return ans


def finished(ans: Answer, run: Run) -> Answer:
    """The answer with the versions the run found, and its time until now (after shutdown)."""
    return replace(ans, versions=run.versions, seconds=round(time.monotonic() - run.t0, 2))


def malformed(error: HandoffError) -> Answer:
    """The answer to a request this rehearsal cannot read (a bug of the tool that sent it)."""
    return Answer(False, ERROR, failure={"exception": f"rehearsal error: {error}"})


def timed_out(run: Run, seconds: float) -> Answer:
    """The answer when the session's watchdog fires (the run is abandoned, the process exits).

    Running out of time says nothing about speculators, wherever the run was (`stage` says where):
    on a busy machine a sound run takes longer; a hang looks the same from here. So it is no
    failure: the run could not finish, and a longer --timeout is the next step."""
    return answer(run, False, TIMEOUT, {
        "exception": f"cannot rehearse: timed out after {seconds:g} s (the machine is busy? pass --timeout)"})

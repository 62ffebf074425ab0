"""The answer the target returns: the outcome, what ran, and what the run found."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .fields import HandoffError, JSONObject, get, ints, known, json_object, json_objects, strs
from .request import Topology, Workload

PASSED = "passed"
FAILED = "failed"  # speculators' code path raised, or returned wrong data
CANNOT = "cannot_rehearse"  # a stand-in does not fit this vLLM, or speculators' code was not reached
# The installed vLLM has no model class for the architecture: a fact about that vLLM (the model
# does not load there, patched or not), neither speculators' fault nor a stand-in's.
NO_MODEL_CLASS = "no_model_class"
TIMEOUT = "timeout"  # the run ran out of time (a busy machine, or a hang): no verdict, like CANNOT
ERROR = "error"  # a bug of the rehearsal itself
OUTCOMES = (PASSED, FAILED, CANNOT, NO_MODEL_CLASS, TIMEOUT, ERROR)


@dataclass(frozen=True)
class Check:
    """One self-check of a stand-in against the vLLM code it replaces; `detail` where it failed."""

    check: str
    ok: bool
    detail: str | None = None

    def to_json(self) -> JSONObject:
        return {"check": self.check, "ok": self.ok, **({"detail": self.detail} if self.detail is not None else {})}

    @classmethod
    def from_json(cls, data: Any) -> Check:
        what = "rehearsal answer: checks"
        data = json_object(data, what)
        known(data, ("check", "ok", "detail"), what)
        return cls(get(data, "check", str, what), get(data, "ok", bool, what),
                   get(data, "detail", str, what, optional=True))


@dataclass(frozen=True)
class Installed:
    """A package as the target has it: its version, and where speculators was imported from."""

    version: str | None
    file: str | None = None

    def to_json(self) -> JSONObject:
        return {"version": self.version, **({"file": self.file} if self.file is not None else {})}

    @classmethod
    def from_json(cls, data: Any, what: str) -> Installed | None:
        if data is None:
            return None
        data = json_object(data, what)
        known(data, ("version", "file"), what)
        return cls(get(data, "version", str, what, optional=True), get(data, "file", str, what, optional=True))


@dataclass(frozen=True)
class Versions:
    speculators: Installed | None = None
    vllm: Installed | None = None

    def to_json(self) -> JSONObject:
        return {"speculators": self.speculators.to_json() if self.speculators else None,
                "vllm": self.vllm.to_json() if self.vllm else None}

    @classmethod
    def from_json(cls, data: Any) -> Versions:
        what = "rehearsal answer: versions"
        data = json_object(data, what)
        known(data, ("speculators", "vllm"), what)
        return cls(Installed.from_json(data.get("speculators"), f"{what}: speculators"),
                   Installed.from_json(data.get("vllm"), f"{what}: vllm"))


@dataclass(frozen=True)
class WorkloadDone:
    """The workload the run drove: its name and size, and the reorder thresholds it rehearsed."""

    name: str
    calls: int
    sequences: int
    tokens: int
    reorder: tuple[int, ...] = ()

    @classmethod
    def of(cls, work: Workload) -> WorkloadDone:
        return cls(work.name, len(work.calls), work.sequences, work.tokens,
                   tuple(sorted({c.reorder for c in work.calls if c.reorder})))

    def to_json(self) -> JSONObject:
        return {"name": self.name, "calls": self.calls, "sequences": self.sequences, "tokens": self.tokens,
                "reorder": list(self.reorder)}

    @classmethod
    def from_json(cls, data: Any) -> WorkloadDone:
        what = "rehearsal answer: workload"
        data = json_object(data, what)
        known(data, ("name", "calls", "sequences", "tokens", "reorder"), what)
        return cls(get(data, "name", str, what), get(data, "calls", int, what), get(data, "sequences", int, what),
                   get(data, "tokens", int, what), ints(get(data, "reorder", list, what), what))


@dataclass(frozen=True)
class Steps:
    """The model's forward steps over the workload: how many, how many chunked a prompt, and in
    how many the runner's batch order differed from the scheduler's."""

    total: int
    chunked: int
    reordered: int

    def to_json(self) -> JSONObject:
        return {"total": self.total, "chunked": self.chunked, "reordered": self.reordered}

    @classmethod
    def from_json(cls, data: Any) -> Steps:
        what = "rehearsal answer: steps"
        data = json_object(data, what)
        known(data, ("total", "chunked", "reordered"), what)
        return cls(get(data, "total", int, what), get(data, "chunked", int, what), get(data, "reordered", int, what))


@dataclass(frozen=True)
class WrongCall:
    """One generate() call whose results were wrong or that left state behind."""

    call: int
    sequences: int
    problems: tuple[JSONObject, ...]  # check.call_problems: one per wrong prompt, keys by kind
    stale_requests: int
    worker_holds: tuple[str, ...]

    def to_json(self) -> JSONObject:
        return {"call": self.call, "sequences": self.sequences, "problems": list(self.problems),
                "stale_requests": self.stale_requests, "worker_holds": list(self.worker_holds)}

    @classmethod
    def from_json(cls, data: Any) -> WrongCall:
        what = "rehearsal answer: wrong"
        data = json_object(data, what)
        known(data, ("call", "sequences", "problems", "stale_requests", "worker_holds"), what)
        return cls(get(data, "call", int, what), get(data, "sequences", int, what),
                   json_objects(get(data, "problems", list, what), f"{what}: problems"),
                   get(data, "stale_requests", int, what), strs(get(data, "worker_holds", list, what), what))


@dataclass(frozen=True)
class CodeSpan:
    """Where speculators' code that produced the data lives (for the rule that fixes it)."""

    file: str
    line: int
    end_line: int
    function: str

    def to_json(self) -> JSONObject:
        return {"file": self.file, "line": self.line, "end_line": self.end_line, "function": self.function}

    @classmethod
    def from_json(cls, data: Any) -> CodeSpan:
        what = "rehearsal answer: data_frames"
        data = json_object(data, what)
        known(data, ("file", "line", "end_line", "function"), what)
        return cls(get(data, "file", str, what), get(data, "line", int, what), get(data, "end_line", int, what),
                   get(data, "function", str, what))


@dataclass(frozen=True)
class Answer:
    """The rehearsal's answer. The fields from `adapter` on are None (absent from the JSON) until
    the run got that far; `versions` is absent from a timed-out run's answer."""

    ok: bool
    outcome: str
    stage: str = "start"
    iterations: int = 0
    captured: dict[str, list[list[int]]] = field(default_factory=dict)  # layer id: each result's shape
    failure: JSONObject | None = None  # frames.describe's fields and where the run failed (see the package)
    real: tuple[str, ...] = ()
    stood_in: tuple[str, ...] = ()
    checks: tuple[Check, ...] = ()
    seconds: float = 0.0
    adapter: str | None = None
    runner: str | None = None
    family: str | None = None
    architecture: str | None = None
    model: str | None = None  # "folder" (--model), "arch" (--arch) or "default"
    topology: Topology | None = None
    layers: dict[str, int] | None = None  # vLLM's attention and expert layers by kind
    sensitivity: float | None = None
    max_rel_diff: float | None = None
    workload: WorkloadDone | None = None
    steps: Steps | None = None
    wrong: tuple[WrongCall, ...] | None = None
    data_frames: tuple[CodeSpan, ...] | None = None
    versions: Versions | None = None

    def __post_init__(self) -> None:
        if self.outcome not in OUTCOMES:
            raise HandoffError(f"rehearsal answer: unknown outcome {self.outcome!r}")

    def to_json(self) -> JSONObject:
        out: JSONObject = {"ok": self.ok, "outcome": self.outcome, "stage": self.stage, "iterations": self.iterations,
                           "captured": self.captured, "failure": self.failure, "real": list(self.real),
                           "stood_in": list(self.stood_in), "checks": [c.to_json() for c in self.checks],
                           "seconds": self.seconds}
        later: JSONObject = {
            "adapter": self.adapter, "runner": self.runner, "family": self.family, "architecture": self.architecture,
            "model": self.model, "topology": self.topology.to_json() if self.topology else None,
            "layers": self.layers, "sensitivity": self.sensitivity, "max_rel_diff": self.max_rel_diff,
            "workload": self.workload.to_json() if self.workload else None,
            "steps": self.steps.to_json() if self.steps else None,
            "wrong": None if self.wrong is None else [w.to_json() for w in self.wrong],
            "data_frames": None if self.data_frames is None else [s.to_json() for s in self.data_frames],
            "versions": self.versions.to_json() if self.versions else None}
        out.update({k: v for k, v in later.items() if v is not None})
        return out

    @classmethod
    def from_json(cls, data: Any) -> Answer:
        what = "rehearsal answer"
        data = json_object(data, what)
        known(data, tuple(cls.__dataclass_fields__), what)
        captured = json_object(get(data, "captured", dict, what), f"{what}: captured")
        for layer, shapes in captured.items():
            if not isinstance(shapes, list) or not all(isinstance(s, list) for s in shapes):
                raise HandoffError(f"{what}: captured {layer!r} is {shapes!r}, not a list of shapes")
            for s in shapes:
                ints(s, f"{what}: captured {layer!r}")
        failure = get(data, "failure", dict, what, optional=True)
        if failure is not None:
            get(json_object(failure, f"{what}: failure"), "exception", str, f"{what}: failure")
        layers = get(data, "layers", dict, what, optional=True)
        if layers is not None and not all(isinstance(n, int) for n in layers.values()):
            raise HandoffError(f"{what}: layers {layers!r} are not counts")
        wrong = get(data, "wrong", list, what, optional=True)
        spans = get(data, "data_frames", list, what, optional=True)
        sensitivity = get(data, "sensitivity", (int, float), what, optional=True)
        diff = get(data, "max_rel_diff", (int, float), what, optional=True)
        return cls(
            get(data, "ok", bool, what), get(data, "outcome", str, what), get(data, "stage", str, what),
            get(data, "iterations", int, what), captured, failure,
            strs(get(data, "real", list, what), f"{what}: real"),
            strs(get(data, "stood_in", list, what), f"{what}: stood_in"),
            tuple(Check.from_json(c) for c in get(data, "checks", list, what)),
            float(get(data, "seconds", (int, float), what)),
            get(data, "adapter", str, what, optional=True), get(data, "runner", str, what, optional=True),
            get(data, "family", str, what, optional=True), get(data, "architecture", str, what, optional=True),
            get(data, "model", str, what, optional=True),
            None if data.get("topology") is None else Topology.from_json(data["topology"]),
            layers, None if sensitivity is None else float(sensitivity), None if diff is None else float(diff),
            None if data.get("workload") is None else WorkloadDone.from_json(data["workload"]),
            None if data.get("steps") is None else Steps.from_json(data["steps"]),
            None if wrong is None else tuple(WrongCall.from_json(w) for w in wrong),
            None if spans is None else tuple(CodeSpan.from_json(s) for s in spans),
            None if data.get("versions") is None else Versions.from_json(data["versions"]))

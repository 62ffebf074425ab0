"""The request the tool sends: the workload (captured layers, one call per generate()) and the
topology, the model, the timeout."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .fields import HandoffError, JSONObject, get, ints, known, json_object, strs

# What a hand-written request leaves out (the tool sends every field).
DEFAULT_LAYERS = (1, 2)
DEFAULT_BATCHES = ((37, 21), (53, 18))
DEFAULT_MAX_MODEL_LEN = 512
DEFAULT_TIMEOUT = 300.0


@dataclass(frozen=True)
class Call:
    """One generate() call: its prompts' lengths, the seed of their token ids, and the
    reorder_batch_threshold of the attention backend rehearsed in it (None: a backend that keeps
    the batch as it is)."""

    lengths: tuple[int, ...]
    seed: int
    reorder: int | None = None

    def to_json(self) -> JSONObject:
        return {"lengths": list(self.lengths), "seed": self.seed, "reorder": self.reorder}

    @classmethod
    def from_json(cls, data: Any, index: int) -> Call:
        what = f"rehearsal request: call {index + 1}"
        data = json_object(data, what)
        known(data, ("lengths", "seed", "reorder"), what)
        seed = get(data, "seed", int, what, optional=True)
        return cls(ints(get(data, "lengths", list, what), what), index if seed is None else seed,
                   get(data, "reorder", int, what, optional=True))


@dataclass(frozen=True)
class Workload:
    """What the rehearsal feeds speculators' generator: the captured layer ids, and one Call per
    generate() on one generator."""

    name: str
    max_model_len: int
    calls: tuple[Call, ...]
    layers: tuple[int, ...] = DEFAULT_LAYERS

    def __post_init__(self) -> None:
        for call in self.calls:
            # speculators truncates a prompt to max_model_len - 1 (one token is left to sample).
            if not call.lengths or min(call.lengths) < 1 or max(call.lengths) >= self.max_model_len:
                raise HandoffError(f"prompt lengths {list(call.lengths)} must be 1..{self.max_model_len - 1}")

    @property
    def sequences(self) -> int:
        return sum(len(c.lengths) for c in self.calls)

    @property
    def tokens(self) -> int:
        return sum(sum(c.lengths) for c in self.calls)

    @classmethod
    def of(cls, name: str, max_model_len: int, calls: tuple[tuple[tuple[int, ...], int | None], ...]) -> Workload:
        """A workload whose calls are seeded by their index: ((prompt lengths, reorder), ...)."""
        return cls(name, max_model_len, tuple(Call(lengths, i, reorder) for i, (lengths, reorder) in enumerate(calls)))


@dataclass(frozen=True)
class Topology:
    """The parallel sizes to rehearse and why (the request), and the world the adapter built
    (the answer: `world_size` and on, None until the workers run)."""

    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    reason: str | None = None
    world_size: int | None = None
    output_rank: int | None = None
    workers: str | None = None
    dtype: str | None = None

    WORLD = ("world_size", "output_rank", "workers", "dtype")

    def to_json(self) -> JSONObject:
        out: JSONObject = {"tensor_parallel_size": self.tensor_parallel_size,
                           "pipeline_parallel_size": self.pipeline_parallel_size, "reason": self.reason}
        out.update({k: getattr(self, k) for k in self.WORLD if getattr(self, k) is not None})
        return out

    @classmethod
    def from_json(cls, data: Any) -> Topology:
        what = "rehearsal answer: topology"
        data = json_object(data, what)
        known(data, ("tensor_parallel_size", "pipeline_parallel_size", "reason", *cls.WORLD), what)
        return cls(get(data, "tensor_parallel_size", int, what), get(data, "pipeline_parallel_size", int, what),
                   get(data, "reason", str, what, optional=True), get(data, "world_size", int, what, optional=True),
                   get(data, "output_rank", int, what, optional=True), get(data, "workers", str, what, optional=True),
                   get(data, "dtype", str, what, optional=True))

    def built(self, world: JSONObject) -> Topology:
        """With the world the adapter's workers report (`view.topology`)."""
        world = json_object(world, "the adapter's topology")
        known(world, ("tensor_parallel_size", "pipeline_parallel_size", *self.WORLD), "the adapter's topology")
        return Topology.from_json({**self.to_json(), **world})


@dataclass(frozen=True)
class Request:
    """What the tool asks the target to rehearse. `model`: a checkpoint folder (--model); `arch`:
    a preset (--arch); neither: the default tiny model. `supported`: the speculators versions whose
    generator the rehearsal drives."""

    workload: Workload
    timeout: float = DEFAULT_TIMEOUT
    verbose: bool = False
    supported: tuple[str, ...] = ()
    model: str | None = None
    arch: str | None = None
    topology: Topology = field(default_factory=Topology)

    def to_json(self) -> JSONObject:
        work = self.workload
        out: JSONObject = {"timeout": self.timeout, "layers": list(work.layers), "workload": work.name,
                           "max_model_len": work.max_model_len, "calls": [c.to_json() for c in work.calls],
                           "verbose": self.verbose, "supported": list(self.supported)}
        out.update({"model": self.model} if self.model is not None else {})
        out.update({"arch": self.arch} if self.arch is not None else {})
        out.update({"tensor_parallel_size": self.topology.tensor_parallel_size,
                    "pipeline_parallel_size": self.topology.pipeline_parallel_size,
                    "topology_reason": self.topology.reason})
        return out

    @classmethod
    def from_json(cls, data: Any) -> Request:
        """The request as the tool sends it; `batches` (lists of prompt lengths, seeded by their
        index) stands for `calls` in hand-written requests, and absent fields take the defaults."""
        what = "rehearsal request"
        data = json_object(data, what)
        known(data, ("timeout", "layers", "workload", "max_model_len", "calls", "batches", "verbose", "supported",
                      "model", "arch", "tensor_parallel_size", "pipeline_parallel_size", "topology_reason"), what)
        layers = ints(data.get("layers") or DEFAULT_LAYERS, f"{what}: layers")
        max_model_len = get(data, "max_model_len", int, what, optional=True) or DEFAULT_MAX_MODEL_LEN
        if data.get("calls"):
            calls = tuple(Call.from_json(c, i) for i, c in enumerate(get(data, "calls", list, what)))
        else:
            batches = get(data, "batches", list, what, optional=True) or DEFAULT_BATCHES
            calls = tuple(Call(ints(b, f"{what}: batch {i + 1}"), i) for i, b in enumerate(batches))
        work = Workload(get(data, "workload", str, what, optional=True) or "custom", max_model_len, calls, layers)
        timeout = get(data, "timeout", (int, float), what, optional=True)
        return cls(work, DEFAULT_TIMEOUT if timeout is None else float(timeout),
                   bool(get(data, "verbose", bool, what, optional=True)),
                   strs(data.get("supported") or (), f"{what}: supported"),
                   get(data, "model", str, what, optional=True), get(data, "arch", str, what, optional=True),
                   Topology(get(data, "tensor_parallel_size", int, what, optional=True) or 1,
                            get(data, "pipeline_parallel_size", int, what, optional=True) or 1,
                            get(data, "topology_reason", str, what, optional=True)))

"""What the rehearsal feeds speculators' generator: the parity workload and the quick one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Workload:
    """What the rehearsal feeds speculators' generator: one entry per generate() call."""

    name: str
    max_model_len: int
    calls: tuple[tuple[tuple[int, ...], int | None], ...]  # (prompt lengths, reorder threshold)

    def as_request(self) -> dict[str, Any]:
        return {"workload": self.name, "max_model_len": self.max_model_len,
                "calls": [{"lengths": list(lengths), "seed": i, "reorder": reorder}
                          for i, (lengths, reorder) in enumerate(self.calls)]}


# Short calls: two batches (the runner's state protocol shows only on the second), every prompt
# longer than one 16-token KV block, lengths that differ so mis-sliced hidden states show.
SHORT_CALLS = (((37, 21), None), ((53, 18), None))
# speculators' own scripts/data_generation_offline.py: --seq-length 2048 --batch-size 8, three
# calls on one generator. Each call holds more tokens than one step's budget (speculators sets
# max(8192, max_model_len)), so the scheduler chunks a prompt across steps; the second and third
# rehearse attention backends that reorder the batch (FlashMLA's reorder_batch_threshold 128,
# FlashInfer's 1). Then 12 prompts (results ordered as strings put req_N_10 before req_N_2), and
# the short calls.
PARITY = Workload("parity", 2048, (
    ((1945, 1700, 300, 2047, 1500, 1800, 650, 1200), None),
    ((2000, 1900, 1800, 1700, 894, 600, 500, 400), 128),
    ((2047, 2047, 2047, 2047, 301, 900, 700, 300), 1),
    ((120, 45, 200, 33, 150, 64, 99, 180, 27, 140, 75, 110), None),
    *SHORT_CALLS,
))
QUICK = Workload("quick", 512, SHORT_CALLS)

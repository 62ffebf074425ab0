"""What the rehearsal feeds speculators' generator: the parity workload and the quick one
(`handoff.Workload`, the value the target drives)."""

from __future__ import annotations

from .handoff import Workload

# Short calls: two batches (the runner's state protocol shows only on the second), every prompt
# longer than one 16-token KV block, lengths that differ so mis-sliced hidden states show.
SHORT_CALLS: tuple[tuple[tuple[int, ...], int | None], ...] = (((37, 21), None), ((53, 18), None))
# speculators' own scripts/data_generation_offline.py: --seq-length 2048 --batch-size 8, three
# calls on one generator. Each call holds more tokens than one step's budget (speculators sets
# max(8192, max_model_len)), so the scheduler chunks a prompt across steps; the second and third
# rehearse attention backends that reorder the batch (FlashMLA's reorder_batch_threshold 128,
# FlashInfer's 1). Then 12 prompts (results ordered as strings put req_N_10 before req_N_2), and
# the short calls.
PARITY = Workload.of("parity", 2048, (
    ((1945, 1700, 300, 2047, 1500, 1800, 650, 1200), None),
    ((2000, 1900, 1800, 1700, 894, 600, 500, 400), 128),
    ((2047, 2047, 2047, 2047, 301, 900, 700, 300), 1),
    ((120, 45, 200, 33, 150, 64, 99, 180, 27, 140, 75, 110), None),
    *SHORT_CALLS,
))
QUICK = Workload.of("quick", 512, SHORT_CALLS)

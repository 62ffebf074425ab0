"""The workload: which layers are captured and which prompts each generate() call gets.

A value, not code: built from the request the tool sends, and turned into token ids here. Pure.
"""

import collections
import random

# Token ids below FIRST_TOKEN are the tokenizer's special tokens (<unk>, <s>, </s>).
FIRST_TOKEN = 3

# reorder: the reorder_batch_threshold of the attention backend rehearsed in that call (None:
# a backend that keeps the batch as it is).
Call = collections.namedtuple("Call", "lengths seed reorder", defaults=(None,))


class Workload(collections.namedtuple("Workload", "layers calls max_model_len name", defaults=("custom",))):
    """layers: captured layer ids; calls: one Call per generate() on one generator."""

    @property
    def sequences(self):
        return sum(len(c.lengths) for c in self.calls)

    @property
    def tokens(self):
        return sum(sum(c.lengths) for c in self.calls)


DEFAULT_LAYERS = (1, 2)
DEFAULT_BATCHES = ((37, 21), (53, 18))
DEFAULT_MAX_MODEL_LEN = 512


def from_request(req):
    """The workload the tool asked for: `calls` ({lengths, seed, reorder}), or `batches` (lists
    of prompt lengths, seeded by their index)."""
    layers = tuple(req.get("layers") or DEFAULT_LAYERS)
    max_model_len = int(req.get("max_model_len") or DEFAULT_MAX_MODEL_LEN)
    if req.get("calls"):
        calls = tuple(Call(tuple(int(n) for n in c["lengths"]), int(c.get("seed", i)), c.get("reorder"))
                      for i, c in enumerate(req["calls"]))
    else:
        batches = req.get("batches") or DEFAULT_BATCHES
        calls = tuple(Call(tuple(int(n) for n in lengths), i) for i, lengths in enumerate(batches))
    for call in calls:
        # speculators truncates a prompt to max_model_len - 1 (one token is left to sample).
        if not call.lengths or min(call.lengths) < 1 or max(call.lengths) >= max_model_len:
            raise ValueError(f"prompt lengths {list(call.lengths)} must be 1..{max_model_len - 1}")
    return Workload(layers, calls, max_model_len, str(req.get("workload") or "custom"))


def prompts(call, vocab):
    """The token ids of one call's prompts: reproducible from the call's seed."""
    rng = random.Random(call.seed)
    return [[rng.randrange(FIRST_TOKEN, vocab) for _ in range(n)] for n in call.lengths]

"""The workload's prompts: the token ids of each generate() call, reproducible from its seed.

The workload itself is a value of the handoff (`handoff.Workload`, built by the tool). Pure.
"""

from __future__ import annotations

import random

from .handoff import Call

# Token ids below FIRST_TOKEN are the tokenizer's special tokens (<unk>, <s>, </s>).
FIRST_TOKEN = 3


def prompts(call: Call, vocab: int) -> list[list[int]]:
    """The token ids of one call's prompts: reproducible from the call's seed."""
    rng = random.Random(call.seed)
    return [[rng.randrange(FIRST_TOKEN, vocab) for _ in range(n)] for n in call.lengths]

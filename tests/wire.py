"""The rehearsal's answer as it crosses the process boundary, for tests that stand in for the
target session: what the target returns (a `handoff.Answer` of the target's side, or the fields a
test names, over a run that got nowhere) goes through JSON and is read back by the tool's type."""

from __future__ import annotations

import json
from typing import Any

from vllm_shim_patch.analysis.handoff import Answer

# The fields every answer of the target has (`_remote/rehearse/answer.py`), at a run's start.
START = {"ok": False, "outcome": "error", "stage": "start", "iterations": 0, "captured": {}, "failure": None,
         "real": [], "stood_in": [], "checks": [], "seconds": 1.0}


def on_the_wire(reply: Any) -> Answer:
    data = {**START, **reply} if isinstance(reply, dict) else reply.to_json()
    return Answer.from_json(json.loads(json.dumps(data)))

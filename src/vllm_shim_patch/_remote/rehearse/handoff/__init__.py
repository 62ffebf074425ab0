"""What crosses the process boundary of the rehearsal: the request the tool sends, the workload in
it, and the answer the target returns, as typed values both sides build and read.

The JSON between the two processes is these values' `to_json()` (a JSON-able object) and
`from_json()` (which checks every field: a malformed request or answer is a `HandoffError` naming
the field, never a KeyError further on). Standard library only and self-contained (it imports
nothing of the package around it): the target imports it as part of the rehearsal package, the
tool loads it by path (`analysis/handoff.py`), so the tool never imports the rehearsal.

The answer's `failure` and the wrong sequences' `problems` stay JSON objects checked for their
shape only: their keys depend on where the run failed (`frames.py`, the adapters' `rank_failure`,
`check.call_problems`), and their key order is part of `--json`.
"""

from .answer import (CANNOT, ERROR, FAILED, NO_MODEL_CLASS, OUTCOMES, PASSED, TIMEOUT, Answer, Check, CodeSpan,
                     Installed, Steps, Versions, WorkloadDone, WrongCall)
from .fields import HandoffError, JSONObject
from .request import Call, Request, Topology, Workload

__all__ = ["CANNOT", "ERROR", "FAILED", "NO_MODEL_CLASS", "OUTCOMES", "PASSED", "TIMEOUT", "Answer", "Call", "Check",
           "CodeSpan", "HandoffError", "Installed", "JSONObject", "Request", "Steps", "Topology", "Versions",
           "Workload", "WorkloadDone", "WrongCall"]

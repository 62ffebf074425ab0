"""The rehearsal's handoff types (`_remote/rehearse/handoff/`), for the tool.

That package is the one definition both processes share; the tool loads it by path under a private
name, as it loads the family table (`rehearse.families`): importing it through the rehearsal package
would import the whole rehearsal into the tool. Type checkers read the package itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .._remote.rehearse.handoff import (CANNOT, ERROR, FAILED, NO_MODEL_CLASS, OUTCOMES, PASSED, TIMEOUT,
                                            Answer, Call, Check, CodeSpan, HandoffError, Request, Steps, Topology,
                                            Workload, WorkloadDone, WrongCall)
else:
    from ..target import load_remote_package

    _handoff = load_remote_package("_vsp_rehearse_handoff", "rehearse", "handoff")
    (CANNOT, ERROR, FAILED, NO_MODEL_CLASS, OUTCOMES, PASSED, TIMEOUT, Answer, Call, Check, CodeSpan, HandoffError,
     Request, Steps, Topology, Workload, WorkloadDone, WrongCall) = (
        getattr(_handoff, name) for name in (
            "CANNOT", "ERROR", "FAILED", "NO_MODEL_CLASS", "OUTCOMES", "PASSED", "TIMEOUT", "Answer", "Call", "Check",
            "CodeSpan", "HandoffError", "Request", "Steps", "Topology", "Workload", "WorkloadDone", "WrongCall"))

__all__ = ["CANNOT", "ERROR", "FAILED", "NO_MODEL_CLASS", "OUTCOMES", "PASSED", "TIMEOUT", "Answer", "Call", "Check",
           "CodeSpan", "HandoffError", "Request", "Steps", "Topology", "Workload", "WorkloadDone", "WrongCall"]

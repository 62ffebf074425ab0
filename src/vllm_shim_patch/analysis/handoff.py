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
    import importlib.util
    import sys

    from ..target import REMOTE

    _NAME = "_vsp_rehearse_handoff"

    def _load():
        loaded = sys.modules.get(_NAME)
        if loaded is not None:
            return loaded
        folder = REMOTE / "rehearse" / "handoff"
        spec = importlib.util.spec_from_file_location(_NAME, folder / "__init__.py",
                                                      submodule_search_locations=[str(folder)])
        module = importlib.util.module_from_spec(spec)
        sys.modules[_NAME] = module  # its relative imports find their package
        spec.loader.exec_module(module)
        return module

    _handoff = _load()
    (CANNOT, ERROR, FAILED, NO_MODEL_CLASS, OUTCOMES, PASSED, TIMEOUT, Answer, Call, Check, CodeSpan, HandoffError,
     Request, Steps, Topology, Workload, WorkloadDone, WrongCall) = (
        getattr(_handoff, name) for name in (
            "CANNOT", "ERROR", "FAILED", "NO_MODEL_CLASS", "OUTCOMES", "PASSED", "TIMEOUT", "Answer", "Call", "Check",
            "CodeSpan", "HandoffError", "Request", "Steps", "Topology", "Workload", "WorkloadDone", "WrongCall"))

__all__ = ["CANNOT", "ERROR", "FAILED", "NO_MODEL_CLASS", "OUTCOMES", "PASSED", "TIMEOUT", "Answer", "Call", "Check",
           "CodeSpan", "HandoffError", "Request", "Steps", "Topology", "Workload", "WorkloadDone", "WrongCall"]

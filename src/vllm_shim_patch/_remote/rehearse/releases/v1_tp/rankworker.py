"""The worker of one rank: the Model Runner V1 stand-in worker and runner, reused as they are, with
what each worker process adds (imports vLLM: imported only once the adapter fits).

vLLM's WorkerWrapperBase resolves parallel_config.worker_cls in the worker process before it
builds the worker: the class below is the first code of the rehearsal that runs there. The
processes are forked, so everything the parent installed is already in place; what must exist
once per process (the failure tap on vLLM's logger) is set up from the worker's __init__.
"""

import os
import sys

from vllm.distributed import get_pp_group, get_tp_group
from vllm.v1.executor import multiproc_executor as mpe

from ... import frames, sharding
from ..v1_engine.view import held
from ..v1_runner import worker as base
from ..v1_runner.runner import StandInModelRunner
from . import ranks

# The method speculators' generator reads the capture with (unique_reply_rank=0): observed on
# every rank, so the reply of a rank that is never read is seen too.
CAPTURE_READ = "_get_captured_states"
QUALNAME = f"{base.MODULE}.RankWorker"

# The runner of every rank and of the unsharded reference: weights by parameter name.
ByNameRunner = type("StandInModelRunner", (StandInModelRunner,), {
    "WEIGHTS_BY_NAME": True, "__module__": StandInModelRunner.__module__, "__qualname__": "StandInModelRunner"})

_SET_UP = []  # the pid whose tap is in place (a forked child inherits the list, not the tap)


def group_ranks():
    try:
        return {"tp_rank": get_tp_group().rank_in_group, "pp_rank": get_pp_group().rank_in_group}
    except Exception:  # noqa: BLE001 - not initialised yet (a failure at start)
        return {"tp_rank": None, "pp_rank": None}


def _classify(exc):
    """(outcome, failure) of an exception raised in this worker, where its traceback is."""
    def root(name):
        module = sys.modules.get(name)
        return os.path.dirname(os.path.abspath(module.__file__)) if module is not None else None

    outcome, failure = frames.classify(exc, "worker", root("speculators"), root("vllm"))
    failure["side"] = "worker"
    return outcome, failure


def set_up_process(folder):
    """Once per worker process: the failure tap on vLLM's worker logger."""
    if os.getpid() in _SET_UP:
        return
    _SET_UP.append(os.getpid())
    mpe.logger.addHandler(ranks.FailureTap(folder, _classify, group_ranks))


def _summary(out):
    """What a capture reply holds: sequences by request id (the patched worker) or layers."""
    if out is None:
        return None
    if isinstance(out, dict):
        return {"sequences": len(out), "rows": sum(int(v[0].shape[0]) for v in out.values() if v)}
    return {"layers": len(out), "rows": int(out[0].shape[0]) if len(out) else 0}


def for_run(folder):
    """The worker class of one run: each process's failures go to `folder`."""
    parent = base.for_run(None, runner=ByNameRunner)

    def __init__(self, *args, **kwargs):
        set_up_process(folder)
        parent.__init__(self, *args, **kwargs)
        self.rehearse_replies = []
        read = getattr(self, CAPTURE_READ, None)
        if read is not None:
            def observed(*a, **k):  # observes, changes nothing: the reply is returned as it is
                out = read(*a, **k)
                self.rehearse_replies.append(_summary(out))
                return out

            setattr(self, CAPTURE_READ, observed)

    return type("RankWorker", (parent,), {
        "__init__": __init__, "rehearse_state": rehearse_state, "rehearse_reorder": rehearse_reorder,
        "rehearse_steps": rehearse_steps, "rehearse_shapes": rehearse_shapes,
        "__module__": base.MODULE, "__qualname__": "RankWorker"})


def rehearse_state(self):
    """What this rank's worker holds after a call, and what it replied to the capture read
    since the last call (read once: cleared here)."""
    replies, self.rehearse_replies = getattr(self, "rehearse_replies", []), []
    kept = held(self)
    return {"rank": self.rank, "pid": os.getpid(), **group_ranks(), "captured_states": "_captured_states" in kept,
            "request_metadata": len(getattr(self, "_request_metadata", None) or ()), "replies": replies}


def rehearse_reorder(self, threshold):
    self.model_runner.reorder_batch_threshold = threshold


def rehearse_steps(self, first=0):
    return self.model_runner.steps[first:]


def rehearse_shapes(self):
    return sharding.full_shapes(self.model_runner.model)

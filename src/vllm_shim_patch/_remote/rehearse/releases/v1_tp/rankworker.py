"""The worker of one rank on Model Runner V1: the V1 stand-in worker and runner, reused as they
are (weights by parameter name), with what each worker process adds (`..v1_engine.rankworker`;
imports vLLM: imported only once the adapter fits).
"""

from ..v1_engine.rankworker import QUALNAME, rank_worker
from ..v1_runner import worker as base
from ..v1_runner.runner import StandInModelRunner

__all__ = ["QUALNAME", "ByNameRunner", "for_run"]

# The runner of every rank and of the unsharded reference: weights by parameter name.
ByNameRunner = type("StandInModelRunner", (StandInModelRunner,), {
    "WEIGHTS_BY_NAME": True, "__module__": StandInModelRunner.__module__, "__qualname__": "StandInModelRunner"})


def for_run(folder):
    """The worker class of one run: each process's failures go to `folder`."""
    return rank_worker(base.for_run(None, runner=ByNameRunner), folder)

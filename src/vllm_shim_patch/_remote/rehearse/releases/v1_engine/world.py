"""A world of worker processes as vLLM's own MultiprocExecutor runs it, read from the parent: the
rank failure, the shards, the shutdown (pure at import: vLLM's modules come through its arguments,
or are imported inside the function that needs them). What
both adapters over such a world (v1-multiproc-tp, v2-multiproc-tp) install and read, whichever
runner each rank builds: `install`, `workers`, `rank_failure`, `shutdown` and the protocol's
answers both give alike (`model_of`, `forward_of`, `worker_failure`), each given the adapter's
stand-ins (`mpe`, `worker`, `worker_module`, `worker_qualname`, `folder`, `watcher`, `deaths`, `view`,
`reference`, `undo`).
"""

import gc
import multiprocessing
import os
import signal
import time
import traceback

from . import ranks

SHUTDOWN_SECONDS = 15.0  # vLLM's shutdown: 4 s for the death pipes, SIGTERM, 4 s, SIGKILL (0.16)


def check_shards(run, view, model):
    """Each rank's whole shape of each parameter against the unsharded model's."""
    from ... import sharding

    whole = sharding.shapes(model)
    wrong = sorted({name for table in view.shapes() for name, (_local, full) in table.items()
                    if whole.get(name) != full})
    run.check("sharded weights vs the unsharded model's parameters", not wrong,
              f"the whole shape assumed for {wrong[:3]} is not the unsharded model's")


def install(standins, unset_names):
    """The platform's stand-ins, the worker's module registered (forked workers inherit it), the
    death tap on the executor's logger, the watcher started, `unset_names` out of the environment;
    `standins.undo` undoes each."""
    from . import platform, unset, worker_module

    s, undo = standins, standins.undo
    platform.install(undo, s.worker_qualname)
    worker_module(undo, s.worker_module, s.worker)
    s.mpe.logger.addHandler(s.deaths)
    undo.callback(s.mpe.logger.removeHandler, s.deaths)
    s.watcher.start()
    undo.callback(s.watcher.stop)
    unset(undo, unset_names)


def workers(run, standins, generator, runner):
    """The generator's worker processes as the run reads them: the unsharded reference (built on
    `runner`, the adapter's runner class) in this process once they exist, each rank's shards
    checked against it."""
    from vllm.utils.import_utils import resolve_obj_by_qualname

    from . import reference
    from .platform import METHOD
    from .rankview import RankWorkers

    s = standins
    s.reference = reference.build(runner, generator.vllm_config)
    extension = resolve_obj_by_qualname(generator.vllm_config.parallel_config.worker_extension_cls)
    s.view = RankWorkers(generator.executor, s.reference, extension, s.folder, METHOD)
    check_shards(run, s.view, s.reference.model)
    return s.view


def model_of(standins):
    """The rows are checked against the reference in this process, not a rank's shards."""
    return standins.reference.model


def forward_of(standins):
    return standins.reference._forward


def worker_failure(standins):
    """The workers are other processes: their failures are `rank_failure`'s."""
    return None


def rank_failure(standins, outcome, failure):
    """The earliest rank failure left in the ranks' folder, else the first worker that died (the
    death tap) with its exit status, else what this process saw, with each rank's reply to the
    capture read when the executor (the view's) answers."""
    folder, deaths, view = standins.folder, standins.deaths, standins.view
    time.sleep(0.3)  # a tap that is writing now (the rank raised as this process saw the RPC fail)
    found = ranks.read(folder)
    procs = worker_processes()
    codes = {ranks.process_rank(p.name): p.exitcode for p in procs} if deaths.names else {}
    world = sorted({ranks.process_rank(p.name) for p in procs})
    outcome, failure = ranks.explain(found, deaths.names, codes, outcome, failure, world)
    states = view.states_now() if not found and not deaths.names and view is not None else None
    if states:
        failure = {**failure, "ranks": ranks.replies(states), "captured_on": ranks.captured_elsewhere(states),
                   "rank0_captured": ranks.rank0_captured(states)}
    return outcome, failure


def worker_processes():
    """vLLM's worker processes of this process (found, not tracked: the executor keeps them)."""
    return [o for o in instances(multiprocessing.process.BaseProcess) if (o.name or "").startswith("VllmWorker-")]


def instances(cls):
    """Every live instance of `cls` (by its type: a lazy module's proxy must not be asked)."""
    return [o for o in gc.get_objects() if issubclass(type(o), cls)]


def shutdown(standins):
    """vLLM's own shutdown of the world, then the reference's distributed state in this process
    torn down."""
    _stop_world(standins.mpe, standins.view)
    if standins.reference is not None:
        from . import reference

        standins.reference = None
        reference.teardown()


def _stop_world(mpe, view):
    """vLLM's own shutdown of each executor (`view`'s, else every live one of `mpe`), then every
    worker process waited for and, past the deadline, killed by its pid."""
    executors = [view.executor] if view is not None else instances(mpe.MultiprocExecutor)
    for ex in executors:
        try:
            ex.shutdown()
        except Exception:  # noqa: BLE001
            traceback.print_exc()
    deadline = time.monotonic() + SHUTDOWN_SECONDS
    for proc in worker_processes():
        proc.join(max(0.0, deadline - time.monotonic()))
    for proc in multiprocessing.active_children():
        try:
            os.kill(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.join(5)

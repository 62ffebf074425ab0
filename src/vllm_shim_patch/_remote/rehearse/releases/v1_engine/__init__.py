"""What every release adapter over vLLM's V1 engine (MultiprocExecutor, WorkerProc, the GPU
Worker) shares, whichever model runner the Worker builds. No adapter itself (it is in no
ADAPTERS entry), and no adapter imports another: each imports what it shares from here.

This face imports no vLLM (the adapters' `fits()` run first). The parts, one concern a module:

- here: the adapters' common plumbing (`missing_member` for `fits()`, `worker_module` and `unset`
  for `install()`, `file_store` for a world this process makes alone), and what both in-process
  adapters install and read (`install_in_process`, `worker_failure`, `rank_failure`, `shutdown`);
- `queues`: the in-process MessageQueues (no vLLM: tested without it);
- `executor`: MultiprocExecutor's start-up replaced by one in-process WorkerProc, the process
  handle stand-in, the tap that keeps a worker's exception;
- `checks`: the self-checks of the in-process executor, of a worker's init_device and of the
  rank taps against vLLM;
- `view`: one in-process worker as the run reads it, and what speculators' extension holds (no vLLM);
- a world of worker processes, vLLM's own MultiprocExecutor at tensor parallel size N: `platform`
  (what a GPU platform sets: worker_cls, float32 kept, torch.compile eager, fork), `rankworker`
  (each process's failure tap and the RPCs the run asks every rank), `ranks` (failures read, not
  waited for; no vLLM), `rankview` (the workers as the run reads them; no vLLM), `world` (the rank
  failure, the shards, the shutdown, and what both world adapters install), `reference` (the
  unsharded model in the parent).
"""

import importlib
import os
import sys
import tempfile
import types

# Where vLLM's resolve_obj_by_qualname finds a rehearsal's worker class (parallel_config.worker_cls).
MODULE = "_rehearse_standins"


def missing_member(needs):
    """Why the installed vLLM lacks one of `needs` ((module, dotted member) pairs), or None."""
    for module, member in needs:
        try:
            obj = importlib.import_module(module)
        except ImportError as e:
            return f"{module} does not import ({type(e).__name__}: {e})"
        for part in member.split("."):
            obj = getattr(obj, part, None)
            if obj is None:
                return f"{module}.{member} is missing"
    return None


def worker_module(undo, name, worker):
    """A module `name` holding the worker class (vLLM resolves worker_cls by qualified name), in
    sys.modules until `undo` closes, then whatever was there before."""
    previous = sys.modules.get(name)
    module = types.ModuleType(name)
    setattr(module, worker.__name__, worker)
    sys.modules[name] = module
    undo.callback(_put_back, sys.modules, name, previous)


def unset(undo, names):
    """`names` out of the environment until `undo` closes."""
    for name in names:
        value = os.environ.pop(name, None)
        if value is not None:
            undo.callback(os.environ.__setitem__, name, value)


def _put_back(table, key, previous):
    if previous is None:
        table.pop(key, None)
    else:
        table[key] = previous


def file_store():
    """The init method of a world this process makes alone: a file store in the rehearsal's own
    temp dir, never a port. A free port picked then bound is a race: two rehearsals side by side
    (CI's two workers) took the same one ("EADDRINUSE" at init_device). torch's gloo and vLLM
    0.12-0.33's init_distributed_environment take a file:// method as they take tcp://."""
    return "file://" + os.path.join(tempfile.mkdtemp(prefix="gloo-"), "store")


# What an adapter with one in-process worker installs and reads of it (v1-multiproc, v2-multiproc):
# the same for either runner, since both run vLLM's own WorkerProc in this process.
def worker_failure(standins):
    fails = standins.created.worker_failures
    return fails[-1] if fails else None


def install_in_process(standins, unset_names):
    """What both in-process adapters install: MultiprocExecutor._init_executor replaced (one
    WorkerProc in this process), the tap on the executor module's logger, the worker's module
    registered, `unset_names` taken out of the environment; `standins.undo` undoes each."""
    s, undo = standins, standins.undo
    executor_cls = s.mpe.MultiprocExecutor
    original = executor_cls._init_executor
    executor_cls._init_executor = s.init_executor
    undo.callback(setattr, executor_cls, "_init_executor", original)
    s.mpe.logger.addHandler(s.tap)
    undo.callback(s.mpe.logger.removeHandler, s.tap)
    worker_module(undo, s.worker_module, s.worker)
    unset(undo, unset_names)


def rank_failure(standins, outcome, failure):
    """One rank, in this process: its failure is the one seen here."""
    return outcome, failure


def shutdown(standins):
    import traceback

    for ex in standins.created.executors:
        try:
            ex.shutdown()
        except Exception:  # noqa: BLE001
            traceback.print_exc()
    for proc in standins.created.procs:
        try:
            proc.shutdown()  # real WorkerProc.shutdown: worker, model parallel, distributed env
        except Exception:  # noqa: BLE001
            traceback.print_exc()

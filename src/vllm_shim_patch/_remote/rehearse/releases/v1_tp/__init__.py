"""vLLM's V1 engine at tensor parallel size N: vLLM's own MultiprocExecutor starts N worker
processes (WorkerProc, shared-memory MessageQueues, death pipes, its worker monitor), which meet
in a gloo group on CPU; the model's weights are sharded by vLLM's own parallel layers.

The face imports no vLLM (`fits()` runs first). The parts, one concern a module:

- `..v1_runner`'s `shims`, `runner`, `worker` and `checks` as they are (they hold wherever the
  worker runs), and `..v1_engine`'s `checks.worker`;
- `platform`: what a GPU platform sets (worker_cls), float32 kept, torch.compile eager, fork;
- `rankworker`: the worker of one rank (the V1 stand-in worker, its runner loading weights by
  name) with the failure tap of its process and the RPCs the run asks every rank;
- `ranks`: failures read, not waited for (the taps, the watcher, the earliest failure; no vLLM);
- `reference`: the unsharded model in this process, the independent reference;
- `view`: the workers as the run reads them (no vLLM).

Nothing of MultiprocExecutor or WorkerProc is replaced.
"""

import contextlib
import dataclasses
import gc
import multiprocessing
import os
import signal
import tempfile
import time
import traceback
import types

NAME = "v1-multiproc-tp"
MULTI_RANK = True  # one worker process per rank
RUNNER = "Model Runner V1"

REAL = [
    "vllm.v1.executor.multiproc_executor.MultiprocExecutor, all of it: _init_executor (the worker processes, "
    "their rendezvous, the shared-memory MessageQueues, death pipes and worker monitor), collective_rpc with "
    "unique_reply_rank, _get_output_rank, execute_model, sample_tokens, shutdown",
    "vllm.v1.executor.multiproc_executor.WorkerProc in each worker process: worker_main, worker_busy_loop, "
    "replies of the reply rank only",
    "vllm.v1.worker.worker_base.WorkerWrapperBase: init_worker (resolves worker_cls, mixes in "
    "worker_extension_cls) in each process",
    "vllm.v1.worker.gpu_worker.Worker methods (as in the one-process rehearsal), one per rank",
    "vllm.distributed: init_worker_distributed_environment over gloo, one group of the world's ranks; "
    "the tensor parallel group's all-reduce and all-gather (torch.distributed on CPU)",
    "vLLM's parallel layers and their weight loaders (QKVParallelLinear, MergedColumnParallelLinear, "
    "RowParallelLinear, VocabParallelEmbedding, FusedMoE): each rank's shard of heads, experts and vocabulary",
    "vllm.v1.worker.gpu_model_runner.GPUModelRunner's _update_states and the persistent batch (each rank)",
]
STOOD_IN = [
    "current_platform.check_and_update_config: vLLM's own, then parallel_config.worker_cls set where it is "
    "'auto' (as CudaPlatform.check_and_update_config names vLLM's GPU Worker there) to the rehearsal's worker",
    "parallel_config.worker_cls: the GPU Worker with one override, init_device (as in the one-process "
    "rehearsal), plus a failure tap per process and RPCs that read each rank's state (observing, never changing)",
    "GPU model runner: the one-process rehearsal's stand-in, one per rank",
    "current_platform.supported_dtypes: float32 first, so dtype 'auto' keeps the tiny model's float32 (in "
    "bfloat16 the split contraction of a row-parallel layer differs from the unsharded one by 1-3%, past the "
    "check's tolerance; a GPU run at tensor parallel 8 differs from a one-GPU run that much too)",
    "torch._dynamo.config.disable: what vLLM wraps in torch.compile (VocabParallelEmbedding's "
    "get_masked_input_and_mask, reached at tensor parallel > 1 only) runs eagerly, the same arithmetic, without "
    "a C++ build in each worker process; the model is uncompiled anyway (speculators sets enforce_eager)",
    "VLLM_WORKER_MULTIPROC_METHOD=fork (vLLM's default): the worker processes inherit the stand-ins",
    "weights: each parameter drawn whole by its name and handed to its own weight_loader (each rank's shard a "
    "slice of one model); the reference is that model unsharded, in the rehearsal's own process",
    "a rank's failure: each worker process classifies what vLLM logs of its exceptions and leaves it in a "
    "folder; the rehearsal ends that rank, so vLLM's worker monitor shuts the executor down instead of the "
    "other ranks waiting in a collective for ever",
]

_NEEDS = (
    ("vllm.v1.executor.multiproc_executor", "MultiprocExecutor._init_executor"),
    ("vllm.v1.executor.multiproc_executor", "MultiprocExecutor.start_worker_monitor"),
    ("vllm.v1.executor.multiproc_executor", "WorkerProc.worker_busy_loop"),
    ("vllm.v1.worker.worker_base", "WorkerWrapperBase.init_worker"),
    ("vllm.v1.worker.gpu_worker", "Worker.init_device"),
    ("vllm.v1.worker.gpu_worker", "init_worker_distributed_environment"),
    ("vllm.v1.worker.gpu_model_runner", "GPUModelRunner.execute_model"),
    ("vllm.platforms.interface", "Platform.check_and_update_config"),
)
UNSET = ("VLLM_ELASTIC_EP_SCALE_UP_LAUNCH",)  # as the V1 adapter: speculators launches no scale-up
SHUTDOWN_SECONDS = 15.0  # vLLM's shutdown: 4 s for the death pipes, SIGTERM, 4 s, SIGKILL (0.16)


def environment():
    """Nothing to set before vLLM is imported."""
    return {}


def fits():
    from ..v1_engine import missing_member

    return missing_member(_NEEDS)


@dataclasses.dataclass
class StandIns:
    """The stand-ins of one run, and what the run made of them."""

    mpe: types.ModuleType  # vllm.v1.executor.multiproc_executor
    gpu_worker: types.ModuleType
    real_runner: type  # GPUModelRunner
    output_cls: type  # ModelRunnerOutput
    runner: type  # the stand-in runner of every rank and of the reference (weights by name)
    worker: type  # RankWorker
    worker_module: str
    worker_qualname: str
    folder: str  # where the ranks leave their failures
    watcher: object  # ranks.Watcher
    deaths: object  # ranks.DeathTap on the executor's logger in this process
    two_phase: bool
    view: object = None  # view.RankWorkers, once the generator's workers exist
    reference: object = None  # the unsharded model's runner
    undo: contextlib.ExitStack = dataclasses.field(default_factory=contextlib.ExitStack)


def build(on_forward):
    """The stand-ins. `on_forward` is not called: the forwards run in the worker processes, and
    the run counts them from the runner's steps. Changes nothing of vLLM: that is `install`."""
    from ..v1_runner import runner, shims, worker
    from . import rankworker, ranks

    folder = tempfile.mkdtemp(prefix="rank-failures-")  # inside the rehearsal's temp dir
    return StandIns(
        mpe=rankworker.mpe, gpu_worker=worker.gpu_worker, real_runner=runner.GPUModelRunner,
        output_cls=shims.ModelRunnerOutput, runner=rankworker.ByNameRunner, worker=rankworker.for_run(folder),
        worker_module=worker.MODULE, worker_qualname=rankworker.QUALNAME, folder=folder,
        watcher=ranks.Watcher(folder), deaths=ranks.DeathTap(), two_phase=shims.TWO_PHASE)


def self_check(run, standins):
    from ...selfcheck import code_names
    from ..v1_engine import checks as engine
    from ..v1_runner import checks
    from . import platform

    s = standins
    checks.runner(run, s.runner, s.real_runner, s.gpu_worker.Worker, s.output_cls, s.two_phase)
    engine.worker(run, s.gpu_worker)
    platform.self_check(run)
    loop = code_names(s.mpe.WorkerProc.worker_busy_loop)
    if hasattr(s.mpe.WorkerProc, "_execute_worker_rpc"):  # 0.33 moved the call and its reply there
        loop |= code_names(s.mpe.WorkerProc._execute_worker_rpc)
    run.check("rank failure tap vs WorkerProc.worker_busy_loop", {"logger", "exception"} <= loop,
              "the worker loop no longer logs an RPC's exception with logger.exception")
    run.check("death tap vs MultiprocExecutor.start_worker_monitor",
              {"logger", "error", "shutdown"} <= code_names(s.mpe.MultiprocExecutor.start_worker_monitor),
              "the worker monitor no longer logs a death and shuts the executor down")


def install(standins):
    """The platform stand-ins, the worker's module registered (forked workers inherit it), the
    death tap, the watcher started, UNSET out of the environment. `restore` undoes each."""
    from ..v1_engine import unset, worker_module
    from . import platform

    s, undo = standins, standins.undo
    platform.install(undo, s.worker_qualname)
    worker_module(undo, s.worker_module, s.worker)
    s.mpe.logger.addHandler(s.deaths)
    undo.callback(s.mpe.logger.removeHandler, s.deaths)
    s.watcher.start()
    undo.callback(s.watcher.stop)
    unset(undo, UNSET)


def restore(standins):
    """Undo what `install` did, in reverse (a second call does nothing)."""
    standins.undo.close()


def workers(run, standins, generator):
    """The generator's worker processes as the run reads them; the unsharded reference is built
    here, in this process, once they exist, and each rank's shards checked against it."""
    from vllm.utils.import_utils import resolve_obj_by_qualname

    from . import reference
    from .platform import METHOD
    from .view import RankWorkers

    s = standins
    executor = generator.executor
    s.reference = reference.build(s.runner, generator.vllm_config)
    extension = resolve_obj_by_qualname(generator.vllm_config.parallel_config.worker_extension_cls)
    s.view = RankWorkers(executor, s.reference, extension, s.folder, METHOD)
    _check_shards(run, s.view, s.reference.model)
    return s.view


def _check_shards(run, view, model):
    from ... import sharding

    whole = sharding.shapes(model)
    wrong = sorted({name for table in view.shapes() for name, (_local, full) in table.items()
                    if whole.get(name) != full})
    run.check("sharded weights vs the unsharded model's parameters", not wrong,
              f"the whole shape assumed for {wrong[:3]} is not the unsharded model's")


def model_of(standins):
    return standins.reference.model


def forward_of(standins):
    return standins.reference._forward


def worker_failure(standins):
    """The workers are other processes: their failures are `rank_failure`'s."""
    return None


def rank_failure(standins, outcome, failure):
    """The earliest rank failure, else the first worker that died (with its exit status), else
    what this process saw, with each rank's reply to the capture read when the executor answers."""
    from . import ranks

    s = standins
    time.sleep(0.3)  # a tap that is writing now (the rank raised as this process saw the RPC fail)
    found = ranks.read(s.folder)
    procs = _worker_processes()
    codes = {ranks.process_rank(p.name): p.exitcode for p in procs} if s.deaths.names else {}
    world = sorted({ranks.process_rank(p.name) for p in procs})
    outcome, failure = ranks.explain(found, s.deaths.names, codes, outcome, failure, world)
    states = s.view.states_now() if not found and not s.deaths.names and s.view is not None else None
    if states:
        failure = {**failure, "ranks": ranks.replies(states), "captured_on": ranks.captured_elsewhere(states),
                   "rank0_captured": ranks.rank0_captured(states)}
    return outcome, failure


def _worker_processes():
    """vLLM's worker processes of this process (found, not tracked: the executor keeps them)."""
    return [o for o in _instances(multiprocessing.process.BaseProcess) if (o.name or "").startswith("VllmWorker-")]


def _instances(cls):
    """Every live instance of `cls` (by its type: a lazy module's proxy must not be asked)."""
    return [o for o in gc.get_objects() if issubclass(type(o), cls)]


def shutdown(standins):
    """vLLM's own shutdown of each executor, then every worker process waited for and, past the
    deadline, killed by its pid; the reference's distributed state in this process torn down."""
    s = standins
    executors = [s.view.executor] if s.view is not None else _instances(s.mpe.MultiprocExecutor)
    for ex in executors:
        try:
            ex.shutdown()
        except Exception:  # noqa: BLE001
            traceback.print_exc()
    deadline = time.monotonic() + SHUTDOWN_SECONDS
    for proc in _worker_processes():
        proc.join(max(0.0, deadline - time.monotonic()))
    for proc in multiprocessing.active_children():
        try:
            os.kill(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.join(5)
    if s.reference is not None:
        from . import reference

        s.reference = None
        reference.teardown()

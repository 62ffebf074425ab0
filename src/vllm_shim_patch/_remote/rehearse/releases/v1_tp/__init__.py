"""vLLM's V1 engine at tensor parallel size N: vLLM's own MultiprocExecutor starts N worker
processes (WorkerProc, shared-memory MessageQueues, death pipes, its worker monitor), which meet
in a gloo group on CPU; the model's weights are sharded by vLLM's own parallel layers.

The face imports no vLLM (`fits()` runs first). The parts, one concern a module:

- `..v1_runner`'s `shims`, `runner`, `worker` and `checks` as they are (they hold wherever the
  worker runs), and `..v1_engine`'s `checks.worker`;
- `..v1_engine`'s parts of a world of ranks: `platform` (what a GPU platform sets: worker_cls,
  float32 kept, torch.compile eager, fork), `rankworker` (the failure tap of each process and the
  RPCs the run asks every rank), `ranks` (failures read, not waited for; no vLLM), `rankview` (the
  workers as the run reads them; no vLLM), `world` (the rank failure, the shards, the shutdown),
- `rankworker`: the worker of one rank (the V1 stand-in worker, its runner loading weights by name);
  `reference` (the unsharded model in this process, the independent reference).

Nothing of MultiprocExecutor or WorkerProc is replaced.
"""

import contextlib
import dataclasses
import tempfile
import types

# The protocol's answers alike for every adapter over a world of rank processes (rows checked
# against the reference in this process; a rank's failure read from the ranks' folder).
from ..v1_engine.world import forward_of, model_of, rank_failure, worker_failure  # noqa: F401

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
    from ..v1_engine import ranks
    from ..v1_engine.rankworker import mpe
    from ..v1_runner import runner, shims, worker
    from . import rankworker

    folder = tempfile.mkdtemp(prefix="rank-failures-")  # inside the rehearsal's temp dir
    return StandIns(
        mpe=mpe, gpu_worker=worker.gpu_worker, real_runner=runner.GPUModelRunner,
        output_cls=shims.ModelRunnerOutput, runner=rankworker.ByNameRunner, worker=rankworker.for_run(folder),
        worker_module=worker.MODULE, worker_qualname=rankworker.QUALNAME, folder=folder,
        watcher=ranks.Watcher(folder), deaths=ranks.DeathTap(), two_phase=shims.TWO_PHASE)


def self_check(run, standins):
    from ..v1_engine import checks as engine
    from ..v1_engine import platform
    from ..v1_runner import checks

    s = standins
    checks.runner(run, s.runner, s.real_runner, s.gpu_worker.Worker, s.output_cls, s.two_phase)
    engine.worker(run, s.gpu_worker)
    platform.self_check(run)
    engine.ranks(run, s.mpe)


def install(standins):
    """The world's stand-ins (`v1_engine.world.install`): platform, the worker's module, the death
    tap, the watcher, UNSET out of the environment. `restore` undoes each."""
    from ..v1_engine import world

    world.install(standins, UNSET)


def restore(standins):
    """Undo what `install` did, in reverse (a second call does nothing)."""
    standins.undo.close()


def workers(run, standins, generator):
    """The generator's worker processes and the unsharded reference on V1's runner (`world.workers`)."""
    from ..v1_engine import world

    return world.workers(run, standins, generator, standins.runner)


def shutdown(standins):
    """vLLM's own shutdown of each executor and its worker processes (`world.shutdown`); the
    reference's distributed state in this process torn down."""
    from ..v1_engine import world

    world.shutdown(standins)

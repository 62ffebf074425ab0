"""Model Runner V2 at tensor parallel size N: vLLM's own MultiprocExecutor starts N worker
processes (WorkerProc, shared-memory MessageQueues, death pipes, its worker monitor), which meet in
a gloo group on CPU; each builds V2's real runner, whose Triton kernels Triton's interpreter runs;
the model's weights are sharded by vLLM's own parallel layers.

The face imports no vLLM (`fits()` runs first). It is built of shared parts:

- `..v1_engine`: a world of ranks (`platform`, `rankworker`, `ranks`, `rankview`, `world`,
  `reference`) as the V1 tensor parallel rehearsal runs it;
- `..v2_runner`: V2's stand-ins (`cuda`, `paged`, `kvcache`, `worker`, `seams`, `checks`).

Nothing of MultiprocExecutor or WorkerProc is replaced.
"""

import contextlib
import dataclasses
import tempfile
import types

from .. import v2_runner
from ..v1_engine import missing_member

# The protocol's answers alike for every adapter over a world of rank processes (rows checked
# against the reference in this process; a rank's failure read from the ranks' folder).
from ..v1_engine.world import forward_of, model_of, rank_failure, worker_failure  # noqa: F401

NAME = "v2-multiproc-tp"
MULTI_RANK = True  # one worker process per rank
RUNNER = v2_runner.RUNNER

REAL = [
    "vllm.v1.executor.multiproc_executor.MultiprocExecutor, all of it: _init_executor (the worker processes, "
    "their rendezvous, the shared-memory MessageQueues, death pipes and worker monitor), collective_rpc, "
    "_get_output_rank, execute_model, sample_tokens, shutdown",
    "vllm.v1.executor.multiproc_executor.WorkerProc in each worker process: worker_main, worker_busy_loop",
    "vllm.v1.worker.worker_base.WorkerWrapperBase: init_worker (resolves worker_cls, mixes in "
    "worker_extension_cls) in each process",
    "vllm.v1.worker.gpu_worker.Worker (as in the one-process V2 rehearsal), one per rank",
    "vllm.v1.worker.gpu.model_runner.GPUModelRunner (Model Runner V2), all of it, one per rank, and its Triton "
    "kernels run by Triton's interpreter (TRITON_INTERPRET=1)",
    "vllm.distributed: init_worker_distributed_environment over gloo; the tensor parallel group's all-reduce and "
    "all-gather (torch.distributed on CPU)",
    "vLLM's parallel layers and their weight loaders: each rank's shard of heads, experts and vocabulary",
]
STOOD_IN = [
    "TRITON_INTERPRET=1 and CUDA_VISIBLE_DEVICES='' set before vLLM is imported (as in the one-process V2 "
    "rehearsal); the forked worker processes inherit them",
    "current_platform.check_and_update_config: vLLM's own, then parallel_config.worker_cls set where it is "
    "'auto' to the rehearsal's worker (vLLM's GPU Worker, init_device and the extensible cache's commits stood "
    "in, plus a failure tap per process and RPCs that read each rank's state)",
    "the extensible KV cache, UvaBuffer, CUDA streams and events, get_current_memory_usage, the paged CPU "
    "attention: as in the one-process V2 rehearsal, in every worker process (installed before the fork)",
    "current_platform.supported_dtypes: float32 first (as the V1 tensor parallel rehearsal)",
    "torch._dynamo.config.disable: vLLM's compiled helpers run eagerly",
    "VLLM_WORKER_MULTIPROC_METHOD=fork (vLLM's default): the worker processes inherit the stand-ins",
    "weights: each parameter drawn whole by its name and handed to its own weight_loader; the reference is that "
    "model unsharded, in the rehearsal's own process",
    "a rank's failure: each worker process classifies what vLLM logs of its exceptions and leaves it in a "
    "folder; the rehearsal ends that rank, so vLLM's worker monitor shuts the executor down",
]

_NEEDS = (
    ("vllm.v1.executor.multiproc_executor", "MultiprocExecutor._init_executor"),
    ("vllm.v1.executor.multiproc_executor", "MultiprocExecutor.start_worker_monitor"),
    ("vllm.v1.executor.multiproc_executor", "WorkerProc.worker_busy_loop"),
    ("vllm.v1.worker.worker_base", "WorkerWrapperBase.init_worker"),
    ("vllm.v1.worker.gpu_worker", "Worker._make_model_runner"),
    ("vllm.v1.worker.gpu_worker", "Worker._init_workspace_and_model_runner"),
    ("vllm.v1.worker.gpu_worker", "init_worker_distributed_environment"),
    ("vllm.v1.worker.gpu.model_runner", "GPUModelRunner.prepare_inputs"),
    ("vllm.v1.worker.gpu.model_runner", "GPUModelRunner.prepare_attn"),
    ("vllm.v1.worker.gpu.buffer_utils", "UvaBuffer"),
    ("vllm.platforms.interface", "Platform.check_and_update_config"),
)
UNSET = ("VLLM_ELASTIC_EP_SCALE_UP_LAUNCH",)


def fits():
    return v2_runner.v1_beside() or missing_member(_NEEDS)


def environment():
    return v2_runner.environment()


@dataclasses.dataclass
class StandIns:
    mpe: types.ModuleType
    gpu_worker: types.ModuleType
    worker: type  # RankWorker over RehearsalV2Worker
    worker_module: str
    worker_qualname: str
    folder: str  # where the ranks leave their failures
    watcher: object  # ranks.Watcher
    deaths: object  # ranks.DeathTap
    resolve: types.FunctionType
    view: object = None
    reference: object = None
    undo: contextlib.ExitStack = dataclasses.field(default_factory=contextlib.ExitStack)


def build(on_forward):
    """The stand-ins. `on_forward` is not called: the forwards run in the worker processes, and
    the run counts them from the runner's steps."""
    from ..v1_engine import rankworker, ranks
    from ..v2_runner import kvcache, seams, worker

    folder = tempfile.mkdtemp(prefix="rank-failures-")
    parent = worker.for_run(None, kvcache.Commitments(), by_name=True)  # each forked rank: its own copy
    return StandIns(
        mpe=rankworker.mpe, gpu_worker=worker.gpu_worker, worker=rankworker.rank_worker(parent, folder),
        worker_module=worker.MODULE, worker_qualname=rankworker.QUALNAME, folder=folder,
        watcher=ranks.Watcher(folder), deaths=ranks.DeathTap(), resolve=seams.resolver())


def self_check(run, standins):
    from ..v1_engine import checks as engine, platform
    from ..v2_runner import seams

    s = standins
    engine.worker(run, s.gpu_worker)
    seams.self_check(run, s.gpu_worker)
    platform.self_check(run)
    engine.ranks(run, s.mpe)


def install(standins):
    """The world's stand-ins (`v1_engine.world.install`) and V2's (`v2_runner.seams`), installed
    before the fork so the worker processes inherit them. `restore` undoes each."""
    from ..v1_engine import world
    from ..v2_runner import seams

    world.install(standins, UNSET)
    seams.install(standins.undo, standins.resolve)


def restore(standins):
    standins.undo.close()


def workers(run, standins, generator):
    """The generator's worker processes and the unsharded reference on V2's runner (`world.workers`)."""
    from ..v1_engine import world
    from ..v2_runner.worker import Reference

    return world.workers(run, standins, generator, Reference)


def shutdown(standins):
    from ..v1_engine import world

    world.shutdown(standins)

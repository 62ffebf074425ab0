"""vLLM's Model Runner V2 (`vllm.v1.worker.gpu.model_runner.GPUModelRunner`) in vLLM's V1 engine,
run in this process: V2's real runner Python and its real Triton kernels, run by Triton's
interpreter (TRITON_INTERPRET=1; CUDA_VISIBLE_DEVICES="" keeps vLLM's Triton switch on without a
GPU driver: `environment`). Unlike the V1 adapters, nothing of the runner is re-stated.

This face imports no vLLM (`fits()` runs first). It is built of shared parts:

- `..v1_engine`: the in-process executor (one real WorkerProc), its checks, the worker's view;
- `..v2_runner`: V2's stand-ins (`cuda`, `paged`, `kvcache`, `worker`, `checks`).
"""

import contextlib
import dataclasses
import types

from .. import v2_runner
from ..v1_engine import install_in_process, missing_member
from ..v1_engine import rank_failure as rank_failure, shutdown as engine_shutdown, worker_failure as worker_failure

NAME = "v2-multiproc"
MULTI_RANK = False  # one in-process worker: tensor and pipeline parallel 1
RUNNER = v2_runner.RUNNER

REAL = [
    "vllm.v1.executor.multiproc_executor.MultiprocExecutor instance: __init__, collective_rpc, execute_model, "
    "sample_tokens, initialize_from_config, _get_output_rank, shutdown",
    "vllm.v1.executor.multiproc_executor.WorkerProc: __init__, worker_busy_loop, handle_output (in this process)",
    "vllm.v1.worker.worker_base.WorkerWrapperBase: init_worker (mixes in worker_extension_cls)",
    "vllm.v1.worker.gpu_worker.Worker: __init__, _init_workspace_and_model_runner (init_workspace_manager), "
    "load_model, get_kv_cache_spec, initialize_from_config (the allocate-up-front path), execute_model, "
    "sample_tokens, shutdown",
    "vllm.v1.worker.gpu.model_runner.GPUModelRunner (Model Runner V2), all of it: __init__, load_model (with the "
    "model handed in), initialize_kv_cache (the KV tensors bound to the layers), execute_model (add, update, "
    "finish requests; gather_batch_req_state and sort_batch_req_ids: the order of the batch; prepare_inputs, "
    "prepare_attn, the model forward), sample_tokens (V2's sampler, gumbel kernels), the request states, block "
    "tables and input buffers",
    "V2's Triton kernels (input batch, block tables, slot mappings, sampling, post-update), run by Triton's "
    "interpreter on CPU (TRITON_INTERPRET=1)",
    "vllm.forward_context.set_forward_context, vllm.distributed parallel state (gloo, world size 1)",
]
STOOD_IN = [
    "TRITON_INTERPRET=1 and CUDA_VISIBLE_DEVICES='' set before vLLM is imported: Triton runs V2's kernels in its "
    "interpreter, and vLLM keeps Triton on with no GPU driver (else its kernels become placeholders)",
    "MultiprocExecutor._init_executor: one in-process WorkerProc over in-process queues (as the V1 rehearsal)",
    "parallel_config.worker_cls: vLLM's GPU Worker with init_device stood in (CPU device, gloo, vLLM's own "
    "_init_workspace_and_model_runner, whose _make_model_runner builds V2's runner on the CPU device)",
    "the extensible KV cache: where the caller leaves CacheConfig.enable_extensible_kv_cache unset, vLLM's own "
    "resolver is asked as on CUDA (is_cuda_alike True for that call: on CPU it answers False); "
    "initialize_from_config then allocates the cache up front, and the rehearsal keeps what a GPU would have "
    "committed (the null block, the rest only after extend_kv_cache): a forward that uses a block past it fails "
    "naming the rule generator-kv-cache-up-front",
    "UvaBuffer: its device view is the CPU tensor itself; pinned memory off (vLLM's own switch)",
    "CUDA streams and events, torch.cuda.stream/current_stream/set_stream/synchronize, torch.accelerator."
    "synchronize: no-ops (CPU runs in program order)",
    "current_platform.get_current_memory_usage: 0 (load_model's memory profiler)",
    "attention backend: the CPU backend's arithmetic over V2's paged KV tensor, through V2's own block table and "
    "slot mapping (its builder hands V2's CommonAttentionMetadata on); the reference forward uses a per-request "
    "history through the same layers",
    "the model: vLLM's registry class built on CPU with the rehearsal's wide dummy weights and CustomOps on "
    "forward_native, handed to V2's own load_model (model=...)",
    "V2's runner observed by a subclass: prepare_inputs records each forward's batch, prepare_attn checks the "
    "blocks used and reports the forward (both call V2's own method first and change nothing)",
]

_NEEDS = (
    ("vllm.v1.executor.multiproc_executor", "MultiprocExecutor._init_executor"),
    ("vllm.v1.executor.multiproc_executor", "WorkerProc._init_message_queues"),
    ("vllm.v1.executor.multiproc_executor", "WorkerProc.worker_busy_loop"),
    ("vllm.v1.executor.multiproc_executor", "WorkerProcHandle"),
    ("vllm.v1.worker.gpu_worker", "Worker._make_model_runner"),
    ("vllm.v1.worker.gpu_worker", "Worker._init_workspace_and_model_runner"),
    ("vllm.v1.worker.gpu_worker", "init_worker_distributed_environment"),
    ("vllm.v1.worker.gpu.model_runner", "GPUModelRunner.prepare_inputs"),
    ("vllm.v1.worker.gpu.model_runner", "GPUModelRunner.prepare_attn"),
    ("vllm.v1.worker.gpu.buffer_utils", "UvaBuffer"),
)
UNSET = ("VLLM_ELASTIC_EP_SCALE_UP_LAUNCH",)


def fits():
    return v2_runner.v1_beside() or missing_member(_NEEDS)


def environment():
    return v2_runner.environment()


@dataclasses.dataclass
class Created:
    executors: list = dataclasses.field(default_factory=list)
    procs: list = dataclasses.field(default_factory=list)
    worker_failures: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class StandIns:
    mpe: types.ModuleType  # vllm.v1.executor.multiproc_executor
    gpu_worker: types.ModuleType
    worker: type  # RehearsalV2Worker of this run
    worker_module: str
    init_executor: types.FunctionType
    tap: object
    commitments: object  # kvcache.Commitments
    resolve: types.FunctionType  # VllmConfig._resolve_extensible_kv_cache's replacement
    created: Created = dataclasses.field(default_factory=Created)
    undo: contextlib.ExitStack = dataclasses.field(default_factory=contextlib.ExitStack)


def build(on_forward):
    from ..v1_engine import executor
    from ..v2_runner import kvcache, seams, worker

    created = Created()
    commitments = kvcache.Commitments()
    return StandIns(
        mpe=executor.mpe, gpu_worker=worker.gpu_worker, worker=worker.for_run(on_forward, commitments),
        worker_module=worker.MODULE, init_executor=executor.init_executor_for(created, worker.QUALNAME),
        tap=executor.WorkerFailureTap(created.worker_failures), commitments=commitments,
        resolve=seams.resolver(), created=created)


def self_check(run, standins):
    from ..v1_engine import checks as engine
    from ..v2_runner import seams

    s = standins
    engine.in_process(run, s.mpe)
    engine.worker(run, s.gpu_worker)
    seams.self_check(run, s.gpu_worker)


def install(standins):
    """The executor's start-up, the worker's module, V2's stand-ins (`v2_runner.seams`); `restore`
    undoes each."""
    from ..v2_runner import seams

    install_in_process(standins, UNSET)
    seams.install(standins.undo, standins.resolve)


def restore(standins):
    standins.undo.close()


def worker_of(standins):
    return standins.created.procs[0].worker.worker


def workers(run, standins, generator):
    from ..v1_engine.view import InProcessWorkers

    view = InProcessWorkers(worker_of(standins), getattr(generator, "executor", None))
    view.set_reorder = _v2_orders_itself
    return view


def _v2_orders_itself(threshold):
    """V2 orders every batch by sort_batch_req_ids (decodes, then short extends, then prefills by
    length), whatever a backend's threshold: nothing to set."""


def model_of(standins):
    return worker_of(standins).model_runner.model


def forward_of(standins):
    return worker_of(standins).model_runner._forward


def shutdown(standins):
    """The shared in-process shutdown, with the CUDA stand-ins back in place while it runs
    (`restore` took them out before): V2's GPUModelRunner.shutdown synchronizes the device, which
    without them asks CUDA for a driver and leaves WorkerProc.shutdown's distributed teardown undone."""
    from ..v2_runner import cuda

    with contextlib.ExitStack() as undo:
        cuda.install(undo)
        engine_shutdown(standins)

"""vLLM's V1 engine with MultiprocExecutor, WorkerProc, the GPU Worker and GPUModelRunner, run
in this process.

Only process plumbing, device set-up and the runner's GPU parts are stood in, so conventions
such as collective_rpc's reply shape come from vLLM itself. This module is the adapter's face and
imports no vLLM (`fits()` runs first); `build()` imports the parts it shares with other adapters:

- `..v1_runner`: the Model Runner V1 stand-in (`shims`, `runner`, `worker`, `checks`);
- `..v1_engine`: the in-process executor (`queues`, `executor`), its `checks`, and `view`, the
  one worker as the run reads it.
"""

import contextlib
import dataclasses
import types

from ..v1_engine import install_in_process, missing_member
from ..v1_engine import rank_failure as rank_failure, shutdown as shutdown, worker_failure as worker_failure

NAME = "v1-multiproc"
MULTI_RANK = False  # one in-process worker: tensor and pipeline parallel 1
RUNNER = "Model Runner V1"

REAL = [
    "vllm.v1.executor.multiproc_executor.MultiprocExecutor instance: __init__ (Executor.__init__), "
    "collective_rpc, execute_model, sample_tokens, initialize_from_config, _get_output_rank, shutdown",
    "vllm.v1.executor.multiproc_executor.WorkerProc: __init__, worker_busy_loop, handle_output, "
    "enqueue_output, ResponseStatus, shutdown (in this process)",
    "vllm.v1.worker.worker_base.WorkerWrapperBase: init_worker (mixes in worker_extension_cls), "
    "execute_model, initialize_from_config, __getattr__ dispatch",
    "vllm.v1.worker.gpu_worker.Worker methods: __init__, load_model, get_kv_cache_spec, "
    "initialize_from_config, compile_or_warm_up_model, execute_model, sample_tokens, shutdown",
    "vllm.v1.worker.gpu_worker.init_worker_distributed_environment (gloo, world size 1)",
    "vllm.v1.worker.gpu_model_runner.GPUModelRunner: get_kv_cache_spec, maybe_remove_all_loras, "
    "_update_states and _may_reorder_batch (the persistent batch, hence the order of the tokens), "
    "and the execute_model/sample_tokens state guards (called on the stand-in runner)",
    "vllm.v1.worker.gpu_input_batch.InputBatch and CachedRequestState (add, remove, condense, swap; "
    "reorder_batch_to_split_decodes_and_prefills with an attention backend's threshold)",
    "vllm.forward_context.set_forward_context, vllm.distributed parallel state",
]
STOOD_IN = [
    "MultiprocExecutor._init_executor: the only replaced executor method; it spawns worker processes and "
    "creates shared-memory MessageQueues. Ours builds one in-process WorkerProc and the queues below, "
    "then sets the same attributes the real one sets",
    "MessageQueue objects (executor rpc_broadcast_mq, worker rpc_broadcast_mq, worker_response_mq): "
    "in-process queues with enqueue/dequeue; messages are pickled like the real queue does; enqueue on the "
    "broadcast queue runs the real WorkerProc.worker_busy_loop until the queue is drained",
    "worker process handles (WorkerProcHandle.proc): an object that is never alive (no process exists)",
    "WorkerProc._init_message_queues: returns the in-process queues instead of shm/zmq ones",
    "parallel_config.worker_cls: a subclass of vLLM's GPU Worker whose only override is init_device "
    "(the real one asserts CUDA devices, sets the CUDA device, snapshots CUDA memory and builds "
    "GPUModelRunner); ours calls vLLM's init_worker_distributed_environment with gloo and builds the "
    "stand-in runner",
    "GPU model runner: a GPUModelRunner subclass that does not run GPUModelRunner.__init__; it loads the "
    "model and runs it on CPU over the tokens in the persistent batch's order (the ~10 index lines of "
    "_prepare_inputs re-stated), and keeps the installed runner's execute_model/sample_tokens state "
    "protocol (its state errors are raised by the real GPUModelRunner code)",
    "CustomOp kernel dispatch: forward_native is selected (CUDA kernels cannot run on CPU)",
    "model registry inspection subprocess: the family's architectures are registered as already-imported "
    "classes, so vLLM's own _ModelInfo.from_model_cls runs in-process (no subprocess, no cache file)",
]

# Members of vLLM this adapter builds on; the first one missing says it does not fit.
_NEEDS = (
    ("vllm.v1.executor.multiproc_executor", "MultiprocExecutor._init_executor"),
    ("vllm.v1.executor.multiproc_executor", "WorkerProc._init_message_queues"),
    ("vllm.v1.executor.multiproc_executor", "WorkerProc.worker_busy_loop"),
    ("vllm.v1.executor.multiproc_executor", "WorkerProcHandle"),
    ("vllm.v1.worker.gpu_worker", "Worker.init_device"),
    ("vllm.v1.worker.gpu_worker", "init_worker_distributed_environment"),
    ("vllm.v1.worker.gpu_model_runner", "GPUModelRunner.execute_model"),
)
# speculators launches no elastic-EP scale-up; a user's variable must not send the real
# Worker.load_model down that path (receive_expert_mapping, the runner's NOT_REACHED eplb members).
UNSET = ("VLLM_ELASTIC_EP_SCALE_UP_LAUNCH",)


def environment():
    """Nothing to set before vLLM is imported."""
    return {}


def fits():
    return missing_member(_NEEDS)


@dataclasses.dataclass
class Created:
    """What the stand-ins made while the run went: executors, in-process WorkerProcs, and the
    exceptions the workers logged (with their tracebacks)."""

    executors: list = dataclasses.field(default_factory=list)
    procs: list = dataclasses.field(default_factory=list)
    worker_failures: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class StandIns:
    """The stand-ins of one run, with the vLLM members they are checked against and replace."""

    mpe: types.ModuleType  # vllm.v1.executor.multiproc_executor
    gpu_worker: types.ModuleType  # vllm.v1.worker.gpu_worker
    real_runner: type  # GPUModelRunner
    output_cls: type  # ModelRunnerOutput
    runner: type  # StandInModelRunner
    worker: type  # RehearsalWorker of this run (its runner reports forwards to the run)
    worker_module: str  # where vLLM's parallel_config.worker_cls finds `worker`
    init_executor: types.FunctionType  # MultiprocExecutor._init_executor's replacement
    tap: object  # a logging.Handler keeping the workers' exceptions in created.worker_failures
    two_phase: bool  # the installed runner steps by execute_model then sample_tokens
    created: Created = dataclasses.field(default_factory=Created)
    undo: contextlib.ExitStack = dataclasses.field(default_factory=contextlib.ExitStack)


def build(on_forward):
    """The stand-ins for the installed vLLM; `on_forward()` is called once per model forward of
    execute_model (the warm-up runs none). Changes nothing of vLLM: that is `install`."""
    from ..v1_engine import executor
    from ..v1_runner import runner, shims, worker

    created = Created()
    return StandIns(
        mpe=executor.mpe, gpu_worker=worker.gpu_worker, real_runner=runner.GPUModelRunner,
        output_cls=shims.ModelRunnerOutput, runner=runner.StandInModelRunner, worker=worker.for_run(on_forward),
        worker_module=worker.MODULE,
        init_executor=executor.init_executor_for(created, worker.QUALNAME, worker.refuse_v2_config),
        tap=executor.WorkerFailureTap(created.worker_failures), two_phase=shims.TWO_PHASE, created=created)


def self_check(run, standins):
    from ..v1_engine import checks as engine
    from ..v1_runner import checks

    s = standins
    checks.runner(run, s.runner, s.real_runner, s.gpu_worker.Worker, s.output_cls, s.two_phase)
    engine.in_process(run, s.mpe)
    engine.worker(run, s.gpu_worker)


def install(standins):
    """Put the stand-ins in place: MultiprocExecutor._init_executor replaced, the tap on the
    executor module's logger, the worker's module registered, UNSET taken out of the
    environment. `restore` undoes each, in reverse."""
    install_in_process(standins, UNSET)


def restore(standins):
    """Undo what `install` did, in reverse (a second call does nothing)."""
    standins.undo.close()


def worker_of(standins):
    """The worker (speculators' extension mixed in) of the one in-process WorkerProc."""
    return standins.created.procs[0].worker.worker


def workers(run, standins, generator):
    """The one in-process worker as the run reads it."""
    from ..v1_engine.view import InProcessWorkers

    return InProcessWorkers(worker_of(standins), getattr(generator, "executor", None))


def model_of(standins):
    """The model the worker loaded (for the reference forward)."""
    return worker_of(standins).model_runner.model


def forward_of(standins):
    """The runner's model call: (input ids, positions, segments, KV history) -> hidden states."""
    return worker_of(standins).model_runner._forward

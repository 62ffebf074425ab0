"""The in-process executor: MultiprocExecutor's process start-up replaced by one real WorkerProc
built in this process, over the in-process queues (imports vLLM: imported only once the adapter
fits). The executor and WorkerProc code that runs after start-up is vLLM's own.
"""

import collections
import inspect
import logging
import multiprocessing
import threading
import weakref

from vllm.v1.executor import multiproc_executor as mpe

from ...answer import CannotRehearse
from . import file_store
from .queues import BroadcastMQ, ResponseMQ, WorkerInbox


class InProcWorkerProc(mpe.WorkerProc):
    """The real WorkerProc, constructed in this process. Only _init_message_queues is
    replaced (it attaches to shared memory / zmq sockets)."""

    def _init_message_queues(self, input_shm_handle, vllm_config):
        self.rpc_broadcast_mq = WorkerInbox()
        self.worker_response_mq = ResponseMQ()
        self.peer_response_handles = []


class NoProcess:
    """WorkerProcHandle.proc: there is no process; never alive."""

    name = "in-process-worker"
    sentinel = None

    def is_alive(self):
        return False

    def terminate(self):
        pass

    def kill(self):
        pass

    def join(self, timeout=None):
        pass


class WorkerFailureTap(logging.Handler):
    """WorkerProc.worker_busy_loop logs every worker exception with logger.exception()
    before sending only str(e) back; keep the exception object (with its traceback)
    so the report can name the worker-side frames."""

    def __init__(self, failures):
        super().__init__(level=0)
        self.failures = failures

    def emit(self, record):
        if record.exc_info and record.exc_info[1] is not None:
            self.failures.append(record.exc_info[1])


def init_executor_for(created, worker_qualname, before=None):
    """The replacement of MultiprocExecutor._init_executor, recording into `created` (the
    adapter's Created: executors, procs); the worker is `worker_qualname`'s class. `before(executor)`,
    where given, runs once the world's size is known, before any worker is built (an adapter's
    refusal of a config it cannot rehearse)."""

    def _init_executor(self):
        """Replaces MultiprocExecutor._init_executor (only). Sets the attributes the real one
        sets; the worker is the real WorkerProc built in this process; no processes, no shm."""
        start(self, created, worker_qualname, before)

    return _init_executor


def start(self, created, worker_qualname, before=None):
    """MultiprocExecutor._init_executor's work for one in-process WorkerProc (`self`: the executor)."""
    self._finalizer = weakref.finalize(self, self.shutdown)
    self.is_failed = False
    self.shutdown_event = threading.Event()
    self.failure_callback = None
    _parallel_sizes(self)
    if before is not None:
        before(self)
    if self.world_size != 1 or self.local_world_size != 1:
        raise CannotRehearse(f"rehearsal runs one in-process worker; world_size={self.world_size}")
    # Device/platform stand-in: on a GPU platform check_and_update_config would have set
    # worker_cls to vllm.v1.worker.gpu_worker.Worker; use its CPU-capable subclass.
    self.parallel_config.worker_cls = worker_qualname
    distributed_init_method = file_store()
    self.rpc_broadcast_mq = BroadcastMQ()
    proc = InProcWorkerProc(
        vllm_config=self.vllm_config,
        local_rank=0,
        rank=0,
        distributed_init_method=distributed_init_method,
        input_shm_handle=None,
        shared_worker_lock=multiprocessing.Lock(),
        **_driver(self),
    )
    created.procs.append(proc)
    self.rpc_broadcast_mq.procs.append(proc)
    self.workers = [mpe.WorkerProcHandle(proc=NoProcess(), rank=0,
                                         worker_response_mq=proc.worker_response_mq,
                                         peer_worker_response_mqs=[], death_writer=None)]
    self.response_mqs = [proc.worker_response_mq]
    self.rpc_broadcast_mq.wait_until_ready()
    for mq in self.response_mqs:
        mq.wait_until_ready()
    self.futures_queue = collections.deque()
    if hasattr(self, "_post_init_executor"):  # not on vLLM 0.12
        self._post_init_executor()
    self.output_rank = self._get_output_rank()
    created.executors.append(self)


def _parallel_sizes(self):
    if hasattr(self, "_get_parallel_sizes"):
        self._get_parallel_sizes()  # sets world_size, local_world_size
    else:
        # vLLM 0.12's _init_executor sets them inline, from the same parallel config.
        self.world_size = self.parallel_config.world_size
        self.local_world_size = self.parallel_config.local_world_size


def _driver(self):
    """The executor names the driver where WorkerProc takes it (vLLM 0.12's decides itself)."""
    if "is_driver_worker" in inspect.signature(mpe.WorkerProc.__init__).parameters:
        return {"is_driver_worker": self._is_driver_worker(0)}
    return {}

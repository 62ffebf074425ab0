"""In-process stand-ins for vLLM's shared-memory MessageQueues (no vLLM needed here).

The executor's rpc_broadcast_mq, each worker's inbox and each worker's response queue. Messages
are pickled on the way, as the real queue does: receivers never share objects with senders, and
an unpicklable payload fails. Delivering a broadcast runs each worker's REAL busy loop
(WorkerProc.worker_busy_loop) until its inbox is drained.
"""

import collections
import pickle
import threading
import time

from ...answer import Drained


def copy(obj):
    """What a receiver gets: the message pickled and unpickled, like the real MessageQueue."""
    return pickle.loads(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))


class WorkerInbox:
    """The worker side of rpc_broadcast_mq (WorkerProc.rpc_broadcast_mq)."""

    def __init__(self):
        self.q = collections.deque()

    def dequeue(self, timeout=None, cancel=None, indefinite=False):
        if self.q:
            return self.q.popleft()
        raise Drained()

    def wait_until_ready(self):
        pass

    def shutdown(self):
        """MessageQueue.shutdown wakes a reader spinning on shared memory (vLLM 0.34's
        WorkerProc and MultiprocExecutor shut their queues down): none spins on this one."""


class BroadcastMQ:
    """The executor side of rpc_broadcast_mq. enqueue delivers a pickled copy to every
    in-process worker and runs the REAL WorkerProc.worker_busy_loop until its inbox is empty.

    `procs`: the workers, each with an `rpc_broadcast_mq` (a WorkerInbox) and a
    `worker_busy_loop()` that leaves by Drained once the inbox is empty."""

    def __init__(self):
        self.procs = []

    def enqueue(self, obj, timeout=None):
        data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        for proc in self.procs:
            proc.rpc_broadcast_mq.q.append(pickle.loads(data))
        for proc in self.procs:
            try:
                proc.worker_busy_loop()
            except Drained:
                pass

    def export_handle(self):
        return None

    def wait_until_ready(self):
        pass

    def shutdown(self):
        """MessageQueue.shutdown wakes a reader spinning on shared memory (vLLM 0.34's
        WorkerProc and MultiprocExecutor shut their queues down): none spins on this one."""


class ResponseMQ:
    """WorkerProc.worker_response_mq / executor response_mqs[rank]. Replies may arrive from
    the real WorkerProc's async-output thread (async scheduling), so dequeue blocks like the
    real queue, up to its timeout (the rehearsal's own watchdog bounds timeout=None)."""

    POLL = 0.05  # seconds between looks at `cancel`

    def __init__(self):
        self.q = collections.deque()
        self.cv = threading.Condition()

    def enqueue(self, obj, timeout=None):
        item = copy(obj)
        with self.cv:
            self.q.append(item)
            self.cv.notify_all()

    def dequeue(self, timeout=None, cancel=None, indefinite=False):
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.cv:
            while not self.q:
                if cancel is not None and cancel.is_set():
                    raise RuntimeError("cancelled")
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise TimeoutError("no reply from the in-process worker")
                self.cv.wait(self.POLL if left is None else min(left, self.POLL))
            return self.q.popleft()

    def wait_until_ready(self):
        pass

    def shutdown(self):
        """MessageQueue.shutdown wakes a reader spinning on shared memory (vLLM 0.34's
        WorkerProc and MultiprocExecutor shut their queues down): none spins on this one."""

"""The V1 adapter's parts that need no vLLM: the in-process queues it shares (`releases/v1_engine`),
and an install/restore that undo everything install did. The parts that subclass vLLM's classes run on the real vLLM
(tests/e2e/test_rehearse_realvllm.py)."""

from __future__ import annotations

import logging
import os
import sys
import threading
import types

import pytest

from vllm_shim_patch._remote.rehearse.answer import Drained
from vllm_shim_patch._remote.rehearse.releases import v1_engine, v1_multiproc, v1_runner
from vllm_shim_patch._remote.rehearse.releases.v1_engine import queues


class Proc:
    """What BroadcastMQ drives: a worker's inbox and its busy loop (here: take every message)."""

    def __init__(self) -> None:
        self.rpc_broadcast_mq = queues.WorkerInbox()
        self.seen: list[object] = []

    def worker_busy_loop(self) -> None:
        while True:
            self.seen.append(self.rpc_broadcast_mq.dequeue())


def test_a_broadcast_reaches_every_worker_as_its_own_copy_and_runs_its_loop_until_drained() -> None:
    mq = queues.BroadcastMQ()
    mq.procs += [Proc(), Proc()]
    message = ("execute_model", {"ids": [1, 2]})
    mq.enqueue(message)
    mq.enqueue("sample_tokens")
    for proc in mq.procs:
        assert proc.seen == [message, "sample_tokens"]
        assert proc.seen[0] is not message and proc.seen[0][1] is not message[1]  # pickled, as the real queue
        assert not proc.rpc_broadcast_mq.q
    assert mq.procs[0].seen[0] is not mq.procs[1].seen[0]


def test_an_unpicklable_message_fails_as_on_the_real_queue() -> None:
    mq = queues.BroadcastMQ()
    mq.procs.append(Proc())
    with pytest.raises(TypeError, match="^cannot pickle '_thread.lock' object$"):
        mq.enqueue({"lock": threading.Lock()})
    assert mq.procs[0].seen == []
    with pytest.raises(TypeError, match="^cannot pickle '_thread.lock' object$"):
        queues.ResponseMQ().enqueue(threading.Lock())


def test_an_empty_inbox_leaves_the_busy_loop_past_its_except_exception() -> None:
    inbox = queues.WorkerInbox()
    with pytest.raises(Drained):
        inbox.dequeue()
    assert not issubclass(Drained, Exception)  # WorkerProc's loop catches Exception only


def test_a_reply_is_a_copy_in_order_even_from_another_thread() -> None:
    mq = queues.ResponseMQ()
    reply = {"rows": [3, 4]}
    mq.enqueue(reply)
    got = mq.dequeue()
    assert got == reply and got is not reply
    sender = threading.Thread(target=mq.enqueue, args=("async output",))
    sender.start()
    assert mq.dequeue() == "async output"  # blocks until the sender's reply is there
    sender.join()


def test_the_queues_shut_down_as_vllm_034s_worker_proc_shuts_its_queues_down() -> None:
    # WorkerProc.shutdown and MultiprocExecutor.shutdown call shutdown() on each queue from vLLM
    # 0.34 (the real one wakes a reader spinning on shared memory); a queue used after it still
    # delivers, as the real one does for a reader that is not spinning.
    mq, reply = queues.BroadcastMQ(), queues.ResponseMQ()
    mq.procs.append(Proc())
    for q in (mq, mq.procs[0].rpc_broadcast_mq, reply):
        assert q.shutdown() is None
    mq.enqueue("after")
    reply.enqueue("reply")
    assert (mq.procs[0].seen, reply.dequeue(timeout=0)) == (["after"], "reply")


def test_a_reply_that_does_not_come_is_the_real_queues_timeout_or_cancel() -> None:
    mq = queues.ResponseMQ()
    with pytest.raises(TimeoutError, match="^no reply from the in-process worker$"):
        mq.dequeue(timeout=0)
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(RuntimeError, match="^cancelled$"):
        mq.dequeue(cancel=cancel)


class Executor:
    def _init_executor(self) -> str:
        return "real"


def _standins(logger: logging.Logger) -> v1_multiproc.StandIns:
    mpe = types.SimpleNamespace(MultiprocExecutor=Executor, logger=logger)
    worker = type("RehearsalWorker", (), {})
    created = v1_multiproc.Created()
    return v1_multiproc.StandIns(
        mpe=mpe, gpu_worker=types.ModuleType("gpu_worker"), real_runner=object, output_cls=object,
        runner=object, worker=worker, worker_module="_vsp_test_standins",
        init_executor=lambda self: "stand-in", tap=logging.NullHandler(), two_phase=True, created=created)


@pytest.mark.parametrize("before", [None, "1"], ids=["env-unset", "env-set"])
def test_restore_undoes_everything_install_did(monkeypatch: pytest.MonkeyPatch, before: str | None) -> None:
    logger = logging.getLogger("vsp-test-mpe")
    name = "VLLM_ELASTIC_EP_SCALE_UP_LAUNCH"
    if before is None:
        monkeypatch.delenv(name, raising=False)
    else:
        monkeypatch.setenv(name, before)
    handlers = list(logger.handlers)
    S = _standins(logger)
    v1_multiproc.install(S)
    try:
        assert Executor()._init_executor() == "stand-in"
        assert S.tap in logger.handlers
        assert sys.modules["_vsp_test_standins"].RehearsalWorker is S.worker
        assert name not in os.environ
    finally:
        v1_multiproc.restore(S)
    assert Executor()._init_executor() == "real"
    assert logger.handlers == handlers
    assert "_vsp_test_standins" not in sys.modules
    assert os.environ.get(name) == before
    v1_multiproc.restore(S)  # a second restore changes nothing
    assert Executor()._init_executor() == "real"


def test_restore_puts_back_a_module_of_the_same_name(monkeypatch: pytest.MonkeyPatch) -> None:
    theirs = types.ModuleType("_vsp_test_standins")
    monkeypatch.setitem(sys.modules, "_vsp_test_standins", theirs)
    S = _standins(logging.getLogger("vsp-test-mpe"))
    v1_multiproc.install(S)
    v1_multiproc.restore(S)
    assert sys.modules["_vsp_test_standins"] is theirs


def test_the_adapters_face_and_the_shared_pure_parts_import_no_vllm() -> None:
    assert "vllm" not in sys.modules
    assert {m for m in sys.modules if m.startswith(v1_multiproc.__name__ + ".")} == set()
    assert {m for m in sys.modules if m.startswith(v1_engine.__name__ + ".")} <= {
        f"{v1_engine.__name__}.{pure}" for pure in ("queues", "checks", "ranks", "rankview", "view", "world")}
    assert {m for m in sys.modules if m.startswith(v1_runner.__name__ + ".")} <= {f"{v1_runner.__name__}.checks"}

"""The references computed by a forked child while the generator runs (`_remote/rehearse/references.py`,
no vLLM, no torch: the reference forward is a stand-in of this test that says which process ran it).
That the child's states equal this process's on the real model is the run's own self-check, asserted
in tests/e2e/test_rehearse_realvllm.py."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from types import SimpleNamespace

import pytest

from vllm_shim_patch._remote.rehearse import references
from vllm_shim_patch._remote.rehearse.answer import CannotRehearse

CALLS = [[[5, 6, 7], [8]], [[9, 10]], [[11]]]


def _where(model, base, prompt, layers, forward):
    """The reference stand-in: which process computed which prompt, under which attention scale."""
    scales = [m.impl.scale for m in model.modules()]
    return {"pid": os.getpid(), "prompt": list(prompt), "layers": list(layers), "scales": scales}


def _model(scale: float = 0.25) -> SimpleNamespace:
    layer = SimpleNamespace(impl=SimpleNamespace(scale=scale))
    return SimpleNamespace(modules=lambda: [layer], layer=layer)


@pytest.fixture
def forked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(references.common, "reference_states", _where)
    made = []

    def make(calls=CALLS, model=None):
        f = references.Forked(str(tmp_path), model or _model(), "base", (1, 2), "forward", calls)
        made.append(f)
        return f

    yield make
    for f in made:
        f.close()


def test_every_call_comes_back_in_order_computed_by_the_child(forked) -> None:
    f = forked().start()
    child = f.pid
    assert f.forked and child not in (None, os.getpid())
    got = [f.get(b) for b in range(len(CALLS))]
    assert [[r["prompt"] for r in call] for call in got] == CALLS
    assert {r["pid"] for call in got for r in call} == {child}
    assert all(r["layers"] == [1, 2] for call in got for r in call)


def test_close_ends_and_reaps_the_child(forked) -> None:
    f = forked().start()
    child = f.pid
    f.close()
    assert f.pid is None
    with pytest.raises(ChildProcessError):  # reaped: no zombie left behind
        os.waitpid(child, os.WNOHANG)
    f.close()  # a second close does nothing


def test_the_scaled_reference_changes_every_scale_and_restores_it(forked) -> None:
    model = _model(0.25)
    f = forked(model=model).start()
    scaled = f.scaled()
    assert (scaled["prompt"], scaled["pid"], scaled["scales"]) == ([5, 6, 7], f.pid, [0.25 * references.SCALE_CHANGE])
    assert model.layer.impl.scale == 0.25  # the child changed its own copy only


def test_without_fork_the_references_are_computed_here(forked, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(os, "fork")
    model = _model(0.5)
    f = forked(model=model).start()
    assert (f.pid, f.forked) == (None, False)
    assert [r["pid"] for r in f.get(0)] == [os.getpid(), os.getpid()]
    assert f.scaled()["scales"] == [0.5 * references.SCALE_CHANGE]
    assert model.layer.impl.scale == 0.5


def test_a_reference_that_raises_in_the_child_is_cannot_rehearse(forked, monkeypatch: pytest.MonkeyPatch) -> None:
    def failing(model, base, prompt, layers, forward):
        if prompt == [9, 10]:
            raise ValueError("no attention metadata")
        return _where(model, base, prompt, layers, forward)

    monkeypatch.setattr(references.common, "reference_states", failing)
    f = forked().start()
    assert [r["prompt"] for r in f.get(0)] == [[5, 6, 7], [8]]
    with pytest.raises(CannotRehearse) as e:
        f.get(1)
    assert str(e.value) == "the reference forward failed: ValueError: no attention metadata"


def test_a_child_killed_before_its_call_is_cannot_rehearse(forked, monkeypatch: pytest.MonkeyPatch) -> None:
    read, write = os.pipe()

    def blocked(model, base, prompt, layers, forward):
        if prompt == [9, 10]:
            os.read(read, 1)  # never written: the child waits here until it is killed
        return _where(model, base, prompt, layers, forward)

    monkeypatch.setattr(references.common, "reference_states", blocked)
    f = forked().start()
    f.get(0)
    os.kill(f.pid, signal.SIGKILL)
    with pytest.raises(CannotRehearse) as e:
        f.get(1)
    assert str(e.value) == "the reference process ended before call 2's states (wait status 9)"
    assert f.pid is None
    os.close(read)
    os.close(write)


def _lie_once_about(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """`os.path.exists` says no once for `path`: as if the parent looked just before the child
    wrote it."""
    real = references.os.path.exists
    lied: list[str] = []

    def exists(p: str) -> bool:
        if p == path and not lied:
            lied.append(p)
            return False
        return real(p)

    monkeypatch.setattr(references.os.path, "exists", exists)


def test_a_file_written_just_before_the_child_ended_is_read(forked, monkeypatch: pytest.MonkeyPatch) -> None:
    f = forked().start()
    os.waitid(os.P_PID, f.pid, os.WEXITED | os.WNOWAIT)  # ended, every file written, not reaped yet
    last = len(CALLS) - 1
    _lie_once_about(references._path(f.folder, last), monkeypatch)
    assert [r["prompt"] for r in f.get(last)] == CALLS[last]


def test_with_sigchld_ignored_an_ended_child_is_no_traceback(forked, monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGCHLD ignored (inherited from whoever started the tool): the kernel reaps the child and
    waitpid has nothing to wait for."""
    previous = signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    try:
        f = forked().start()
        child = f.pid
        while True:  # until the kernel has reaped it
            try:
                os.kill(child, 0)
            except ProcessLookupError:
                break
            os.sched_yield()
        last = len(CALLS) - 1
        _lie_once_about(references._path(f.folder, last), monkeypatch)
        assert [r["prompt"] for r in f.get(last)] == CALLS[last]
        os.remove(references._path(f.folder, 1))
        f.pid = child  # as if still held: the wait finds no child
        with pytest.raises(CannotRehearse) as e:
            f.get(1)
        assert str(e.value) == ("the reference process ended before call 2's states (its wait status "
                                "unknown: SIGCHLD is ignored here)")
    finally:
        signal.signal(signal.SIGCHLD, previous)

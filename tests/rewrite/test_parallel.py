"""A plan's files in two processes (rewrite/parallel.py): the same results in the same order as one
process makes them, whatever happens to the child; an interrupt leaves no child behind.

`_Engine` is a stand-in for the engine (its `weight` and `transform`, what `transform_all` calls),
so a test can see which process made a file and make the child fail; the real engine on the real
releases is `test_the_plan_of_a_real_release_is_the_same_in_two_processes` (slow tier).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from vllm_shim_patch.kinds import FileStatus
from vllm_shim_patch.rewrite import parallel
from vllm_shim_patch.rewrite.parallel import _share, transform_all
from vllm_shim_patch.rewrite.results import FileResult

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="forks on Linux only")


@pytest.fixture(autouse=True)
def _forks(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tests here fork whatever threads pytest runs: a pytest-xdist worker has execnet's, and
    `_can_fork` would refuse (every file made here, a test of the child proving nothing, and the
    interrupt test waiting on a child that never came). The child runs only the engine, which
    takes no lock those threads hold. `_can_fork` itself is tested in fresh interpreters."""
    monkeypatch.setattr(parallel, "_can_fork", lambda: True)

FILES = [("a.py", b"x = 1\n" * 50), ("b.py", b""), ("c.py", b"y = 2\n" * 200), ("d.py", b"z = 3\n" * 100)]


class _Engine:
    """A stand-in: a file's weight is its size; its result says which process made it. `in_child`
    runs in the child for every file it makes."""

    def __init__(self, in_child: object = None, in_parent: object = None):
        self.parent = os.getpid()
        self.in_child = in_child
        self.in_parent = in_parent

    def weight(self, data: bytes, path: str) -> int:
        return len(data)

    def transform(self, data: bytes, path: str) -> FileResult:
        here = os.getpid()
        hook = self.in_parent if here == self.parent else self.in_child
        if callable(hook):
            hook(path)
        return FileResult(path, FileStatus.UNCHANGED, data, data, reason="parent" if here == self.parent else "child")


def _made_by(results: list[FileResult]) -> list[tuple[str, str]]:
    return [(r.path, r.reason) for r in results]


def test_the_largest_file_stays_and_each_next_goes_to_the_lighter_side() -> None:
    assert _share([300, 0, 1200, 600]) == [0, 3]
    assert _share([100, 100, 100]) == [1]
    assert _share([5, 0, 0]) == []  # one file needs libcst: no fork
    assert _share([0, 0]) == []


def test_the_child_makes_its_share_and_the_order_is_kept() -> None:
    results = transform_all(_Engine(), FILES)  # type: ignore[arg-type]
    assert _made_by(results) == [("a.py", "child"), ("b.py", "parent"), ("c.py", "parent"), ("d.py", "child")]
    assert [r.before for r in results] == [data for _, data in FILES]


def test_no_fork_when_asked_not_to() -> None:
    results = transform_all(_Engine(), FILES, fork=False)  # type: ignore[arg-type]
    assert {reason for _, reason in _made_by(results)} == {"parent"}


def test_what_the_child_prints_reaches_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    results = transform_all(_Engine(in_child=lambda path: print(f"made {path}")), FILES)  # type: ignore[arg-type]
    assert _made_by(results)[0] == ("a.py", "child")
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("", "made a.py\nmade d.py\n")


def _exit(path: str) -> None:
    os._exit(3)


def _killed(path: str) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _raises(path: str) -> None:
    raise KeyboardInterrupt


@pytest.mark.parametrize("fails", [_exit, _killed, _raises], ids=["exits-3", "killed", "raises"])
def test_a_failed_child_has_its_files_made_here(fails: object) -> None:
    results = transform_all(_Engine(in_child=fails), FILES)  # type: ignore[arg-type]
    assert _made_by(results) == [("a.py", "parent"), ("b.py", "parent"), ("c.py", "parent"), ("d.py", "parent")]


def test_no_child_to_be_had_means_every_file_is_made_here(monkeypatch: pytest.MonkeyPatch) -> None:
    def fork() -> int:
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(parallel.os, "fork", fork)
    results = transform_all(_Engine(), FILES)  # type: ignore[arg-type]
    assert _made_by(results) == [("a.py", "parent"), ("b.py", "parent"), ("c.py", "parent"), ("d.py", "parent")]


def test_an_unreadable_answer_has_its_files_made_here(monkeypatch: pytest.MonkeyPatch) -> None:
    def garbled(sent: bytes, status: int, count: int) -> object:
        return real(sent[:-1], status, count)

    real = parallel._answer
    monkeypatch.setattr(parallel, "_answer", garbled)
    results = transform_all(_Engine(), FILES)  # type: ignore[arg-type]
    assert {reason for _, reason in _made_by(results)} == {"parent"}


def test_an_interrupt_here_kills_and_reaps_the_child() -> None:
    """The parent is interrupted while the child works (paused until a signal ends it): the
    interrupt comes out, and the child is gone, reaped (no such process). The child keeps only
    its pipe's end and the standard streams, so it tells its pid through fd 0, a pipe's write end
    for the moment of the fork; the parent gives its own copy up first, so a child that died
    before telling is an empty read, not a wait for ever."""
    said, tell = os.pipe()
    stdin = os.dup(0)
    os.dup2(tell, 0)
    os.close(tell)

    def child(path: str) -> None:
        os.write(0, str(os.getpid()).encode())
        signal.pause()

    pids: list[int] = []

    def parent(path: str) -> None:
        os.dup2(stdin, 0)
        pids.append(int(os.read(said, 64)))
        raise KeyboardInterrupt

    try:
        with pytest.raises(KeyboardInterrupt):
            transform_all(_Engine(in_child=child, in_parent=parent), FILES)  # type: ignore[arg-type]
    finally:
        os.dup2(stdin, 0)
        os.close(stdin)
        os.close(said)
    assert pids and pids[0] != os.getpid()
    with pytest.raises(ProcessLookupError):
        os.kill(pids[0], 0)


def test_the_child_keeps_no_descriptor_of_the_parents(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An overlay lock's descriptor, say: co-held by a child, the lock outlives a killed tool."""
    held = os.open(tmp_path / "lock", os.O_CREAT | os.O_RDWR)

    def look(path: str) -> None:
        try:
            os.fstat(held)
            print(f"{path}: open")
        except OSError:
            print(f"{path}: closed")

    try:
        results = transform_all(_Engine(in_child=look), FILES)  # type: ignore[arg-type]
        os.fstat(held)  # still open here
    finally:
        os.close(held)
    assert _made_by(results)[0] == ("a.py", "child")
    assert capsys.readouterr().err == "a.py: closed\nd.py: closed\n"


def test_with_sigchld_ignored_the_files_are_made_here() -> None:
    """The kernel reaps the child itself, so how it ended cannot be read: its answer is not
    trusted (`_can_fork` refuses this case; here SIGCHLD is ignored past the check)."""
    previous = signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    try:
        results = transform_all(_Engine(), FILES)  # type: ignore[arg-type]
    finally:
        signal.signal(signal.SIGCHLD, previous)
    assert _made_by(results) == [("a.py", "parent"), ("b.py", "parent"), ("c.py", "parent"), ("d.py", "parent")]


FLUSHED = """
import sys
from vllm_shim_patch.kinds import FileStatus
from vllm_shim_patch.rewrite import parallel
from vllm_shim_patch.rewrite.results import FileResult

class Engine:
    def weight(self, data, path):
        return 1
    def transform(self, data, path):
        if path == "b.py":  # the child's
            sys.__stdout__.write("child\\n")
            sys.__stdout__.flush()
        return FileResult(path, FileStatus.UNCHANGED, data, data)

print("pending", end=" ")  # block-buffered: stdout is a pipe
parallel.transform_all(Engine(), [("a.py", b""), ("b.py", b"")])
print("done")
"""


def test_output_pending_at_the_fork_is_written_once() -> None:
    """A child that writes through a stream bound before (sys.__stdout__, a logging handler's)
    would otherwise write the parent's pending bytes too."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    r = subprocess.run([sys.executable, "-c", FLUSHED], capture_output=True, text=True, check=False, env=env)
    assert (r.returncode, r.stdout, r.stderr) == (0, "pending child\ndone\n", "")


CAN_FORK = """
import sys, threading
from vllm_shim_patch.rewrite.parallel import _can_fork
alone = _can_fork()
release = threading.Event()
thread = threading.Thread(target=release.wait)
thread.start()
beside = _can_fork()
release.set()
thread.join()
import signal
signal.signal(signal.SIGCHLD, signal.SIG_IGN)
print(alone, beside, _can_fork())
"""


def test_a_second_thread_or_an_ignored_sigchld_means_no_fork() -> None:
    """In a fresh interpreter (this one may have pytest's threads): alone it forks, with a second
    thread it does not, nor with SIGCHLD ignored (the kernel would reap the child)."""
    r = subprocess.run([sys.executable, "-c", CAN_FORK], capture_output=True, text=True, check=False)
    assert (r.returncode, r.stdout, r.stderr) == (0, "True False False\n", "")


@pytest.mark.slow  # the real wheels
def test_the_plan_of_a_real_release_is_the_same_in_two_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    import realdata
    from packaging.version import Version

    from vllm_shim_patch.rewrite.engine import Engine
    from vllm_shim_patch.rules.loader import load_pack

    rules = load_pack().rules
    answers: list[object] = []
    real = parallel._answer

    def spied(sent: bytes, status: int | None, count: int) -> object:
        answers.append(real(sent, status, count))
        return answers[-1]

    monkeypatch.setattr(parallel, "_answer", spied)
    # Each release once, for a vLLM that changes it (the prefilter's test covers the versions).
    for speculators, vllm in zip(realdata.SPECULATORS, ("0.17", "0.33", "0.25.1"), strict=False):
        with zipfile.ZipFile(realdata.speculators_wheel(speculators)) as zf:
            files = [(n, zf.read(n)) for n in sorted(zf.namelist()) if n.endswith(".py")]
        # No time limit: a loaded machine must not fail one side of the comparison alone.
        engine = Engine(rules, Version(vllm), compile_here=False, codemod_seconds=None)
        assert len(parallel._share([engine.weight(d, p) for p, d in files])) > 0
        one = [engine.transform(data, path) for path, data in files]
        answers.clear()
        assert transform_all(engine, files) == one
        # The child's answer was used, not redone here (a failed child passes the line above).
        assert len(answers) == 1 and answers[0] is not None
        assert any(r.status is FileStatus.CHANGED for r in one)

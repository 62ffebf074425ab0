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


def test_an_interrupt_here_kills_and_reaps_the_child(tmp_path: Path) -> None:
    """The parent is interrupted while the child works (it waits, blocked, on a pipe nobody
    writes): the interrupt comes out, and the child is gone, reaped (no such process)."""
    said, tell = os.pipe()
    wait, _never = os.pipe()

    def child(path: str) -> None:
        os.write(tell, str(os.getpid()).encode())
        os.read(wait, 1)  # blocks until killed

    pids: list[int] = []

    def parent(path: str) -> None:
        pids.append(int(os.read(said, 64)))
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        transform_all(_Engine(in_child=child, in_parent=parent), FILES)  # type: ignore[arg-type]
    assert pids and pids[0] != os.getpid()
    with pytest.raises(ProcessLookupError):
        os.kill(pids[0], 0)
    for fd in (said, tell, wait, _never):
        os.close(fd)


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
print(alone, beside)
"""


def test_a_second_thread_means_no_fork() -> None:
    """In a fresh interpreter (this one may have pytest's threads): alone it forks, with a second
    thread it does not."""
    r = subprocess.run([sys.executable, "-c", CAN_FORK], capture_output=True, text=True, check=False)
    assert (r.returncode, r.stdout, r.stderr) == (0, "True False\n", "")


@pytest.mark.slow  # the real wheels
def test_the_plan_of_a_real_release_is_the_same_in_two_processes() -> None:
    import realdata
    from packaging.version import Version

    from vllm_shim_patch.rewrite.engine import Engine
    from vllm_shim_patch.rules.loader import load_pack

    rules = load_pack().rules
    # Each release once, for a vLLM that changes it (the prefilter's test covers the versions).
    for speculators, vllm in zip(realdata.SPECULATORS, ("0.17", "0.33", "0.25.1"), strict=False):
        with zipfile.ZipFile(realdata.speculators_wheel(speculators)) as zf:
            files = [(n, zf.read(n)) for n in sorted(zf.namelist()) if n.endswith(".py")]
        # No time limit: a loaded machine must not fail one side of the comparison alone.
        engine = Engine(rules, Version(vllm), compile_here=False, codemod_seconds=None)
        assert len(parallel._share([engine.weight(d, p) for p, d in files])) > 0
        one = [engine.transform(data, path) for path, data in files]
        assert transform_all(engine, files) == one
        assert any(r.status is FileStatus.CHANGED for r in one)

"""A plan's files shared between this process and a forked copy of it, one core each.

The engine's passes are most of a first dry run after libcst's import, and they run file by file
with nothing shared between files: a package's one large module takes about two thirds of them,
the rest could run beside it. Where the OS forks a running interpreter (Linux), this process is
its only thread, and at least two files need libcst, `transform_all` forks: the child makes the
results of a share of the files (the largest one stays here) and sends them back pickled, with
what their codemods printed; this process makes the others meanwhile. The results are the
engine's either way, in the order of `files`: a child that fails in any way (it died, it was
killed, its answer does not read) has its files made here.

The child is the parent's copy up to the fork: it leaves by `os._exit` whatever happens, so it
never unwinds into the caller's `finally` blocks (a transaction's, a temp folder's), and SIGINT and
SIGTERM end it outright. The parent kills and reaps it on any way out.
"""

from __future__ import annotations

import contextlib
import io
import os
import pickle
import signal
import sys
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .engine import Engine
    from .results import FileResult

_SIGNALS = {signal.SIGINT, signal.SIGTERM}
_MAX_FD = os.sysconf("SC_OPEN_MAX") if hasattr(os, "sysconf") else 1 << 16


def transform_all(engine: Engine, files: Sequence[tuple[str, bytes]], fork: bool = True) -> list[FileResult]:
    """`engine.transform` of every (path, bytes) of `files`, in their order (`fork`: where it can,
    in two processes)."""
    theirs = _share([engine.weight(data, path) for path, data in files]) if fork and _can_fork() else []
    if not theirs:
        return [engine.transform(data, path) for path, data in files]
    results: dict[int, FileResult] = {}
    read, write = os.pipe()
    pid = 0
    try:
        from ..interrupts import held

        # An interrupt arriving now is raised once the child's pid is known (held), and never in
        # the child before it takes the default action for it (blocked across the fork).
        with held():
            # Flushed first: the child leaves by os._exit, but a stream it writes through would
            # carry the parent's pending bytes a second time.
            sys.stdout.flush()
            sys.stderr.flush()
            blocked = signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)
            try:
                pid = os.fork()
                if pid == 0:
                    _child(engine, [files[i] for i in theirs], read, write, blocked)
            except OSError:  # no child (out of memory or processes): every file is made here
                theirs = []
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        fd, write = write, -1  # forgotten first: an fd closed twice may be another file's by then
        os.close(fd)
        for i, (path, data) in enumerate(files):
            if i not in theirs:
                results[i] = engine.transform(data, path)
        if not pid:
            return [results[i] for i in range(len(files))]
        sent = _read_all(read)  # to its end: the child closes it as it exits
        with held():  # reaped and forgotten together: a pid once reaped may be another process's
            status: int | None
            try:
                status = os.waitpid(pid, 0)[1]
            except ChildProcessError:  # reaped by the kernel (SIGCHLD ignored since the check)
                status = None
            pid = 0
        answer = _answer(sent, status, len(theirs))
        if answer is not None:
            made, printed = answer
            results.update(zip(theirs, made))
            if printed:
                sys.stderr.write(printed)
    finally:
        with held():  # a second interrupt here would leave the child unreaped and the pipe open
            if pid:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
                with contextlib.suppress(OSError):
                    os.waitpid(pid, 0)
            os.close(read)
            if write >= 0:
                os.close(write)
    # The child's files it did not answer for, made here.
    return [results[i] if i in results else engine.transform(data, path) for i, (path, data) in enumerate(files)]


def _can_fork() -> bool:
    """Linux (a forked copy of an interpreter elsewhere is not safe to run on: macOS's system
    libraries), no other thread (one holding a lock at the fork would leave it held in the child:
    its OS threads, not Python's alone: a C library's too), and SIGCHLD not ignored (inherited
    from whoever started the tool: the kernel would reap the child before its status is read)."""
    if not sys.platform.startswith("linux") or threading.current_thread() is not threading.main_thread():
        return False
    if signal.getsignal(signal.SIGCHLD) == signal.SIG_IGN:
        return False
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:
        return False


def _share(weights: list[int]) -> list[int]:
    """The indices of the files the child makes: the heaviest file stays here, each next one goes
    to the lighter side; none (no fork) where fewer than two files need libcst at all."""
    order = sorted((i for i, w in enumerate(weights) if w > 0), key=lambda i: (-weights[i], i))
    if len(order) < 2:
        return []
    here, there, theirs = 0, 0, []
    for i in order:
        if there < here:
            there += weights[i]
            theirs.append(i)
        else:
            here += weights[i]
    return sorted(theirs)


def _child(engine: Engine, files: list[tuple[str, bytes]], read: int, write: int, blocked: set[int]) -> None:
    """The forked child: the results of `files` and what their codemods printed, pickled to
    `write`; it never returns."""
    code = 1
    try:
        for signum in _SIGNALS:
            signal.signal(signum, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        # Every descriptor inherited but its own pipe's end and the standard streams: the overlay
        # lock's (co-held while the child lives, even past the parent's death), the target
        # grammar's pipes, the read end.
        os.closerange(3, write)
        os.closerange(write + 1, _MAX_FD)
        import gc

        gc.disable()  # a collection would touch, and so copy, every page of the parent's heap
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
            made = [engine.transform(data, path) for path, data in files]
        data = pickle.dumps((made, printed.getvalue()), protocol=pickle.HIGHEST_PROTOCOL)
        view = memoryview(data)
        while view:
            view = view[os.write(write, view):]
        code = 0
    finally:
        os._exit(code)


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


def _answer(sent: bytes, status: int | None, count: int) -> tuple[list[FileResult], str] | None:
    """The child's results and what was printed, or None: it failed (or how it ended is unknown)."""
    if status is None or not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0:
        return None
    try:
        made, printed = pickle.loads(sent)
    except Exception:  # noqa: BLE001  (an answer that does not read: its files are made here)
        return None
    if not isinstance(made, list) or len(made) != count or not isinstance(printed, str):
        return None
    return made, printed

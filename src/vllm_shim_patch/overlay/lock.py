"""One process per package: an flock the kernel drops when its holder dies, so none goes stale."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from ..errors import LockedError, UntrustedOverlayError

_FLAGS = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


def open_lock(lock_file: Path) -> int:
    """The lock file, opened (made if missing) without following a link or blocking on a FIFO."""
    try:
        fd = os.open(lock_file, _FLAGS, 0o644)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO):
            raise _not_ours(lock_file) from None
        raise
    if not _regular(fd):
        os.close(fd)
        raise _not_ours(lock_file)
    return fd


def _regular(fd: int) -> bool:
    import stat

    return stat.S_ISREG(os.fstat(fd).st_mode)


def _not_ours(lock_file: Path) -> UntrustedOverlayError:
    return UntrustedOverlayError(f"{lock_file} is not a plain file (a link, a folder or a FIFO): this tool never "
                                 f"made it; remove it (rm -r {lock_file}) and run again; nothing was changed")


@contextlib.contextmanager
def hold(lock_file: Path, wait: bool = False) -> Iterator[None]:
    """Hold the lock for the body; without `wait`, fail at once naming the holder's pid."""
    while True:
        fd = open_lock(lock_file)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except OSError as exc:
            os.close(fd)
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            raise LockedError(
                f"another patch-speculators (pid {_holder_pid(lock_file)}) is working on this package; "
                f"wait for it or run again with --wait"
            ) from None
        if _same_file(fd, lock_file):
            break
        # A first run that recorded nothing removed the lock file while we waited for it: lock the new one.
        os.close(fd)
        lock_file.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield
    finally:
        os.close(fd)


def _same_file(fd: int, path: Path) -> bool:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)


def _holder_pid(lock_file: Path) -> str:
    try:
        fd = os.open(lock_file, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return "unknown"
    try:
        return os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
    finally:
        os.close(fd)


def holder(lock_file: Path) -> str | None:
    """The pid holding the lock, or None when nobody does (a journal is then a crash's)."""
    try:
        fd = os.open(lock_file, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not _regular(fd):
            return None
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
    finally:
        os.close(fd)
    return None

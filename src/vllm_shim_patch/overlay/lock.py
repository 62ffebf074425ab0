"""One process per package: an flock the kernel drops when its holder dies, so none goes stale."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from ..errors import LockedError


@contextlib.contextmanager
def hold(lock_file: Path, wait: bool = False) -> Iterator[None]:
    """Hold the lock for the body; without `wait`, fail at once naming the holder's pid."""
    fd = os.open(lock_file, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            raise LockedError(
                f"another patch-speculators (pid {holder}) is working on this package; "
                f"wait for it or run again with --wait"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield
    finally:
        os.close(fd)


def holder(lock_file: Path) -> str | None:
    """The pid holding the lock, or None when nobody does (a journal is then a crash's)."""
    try:
        fd = os.open(lock_file, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
    finally:
        os.close(fd)
    return None

"""Byte-faithful file IO: RECORD-style hashes, atomic writes, stale bytecode removal.

Standard library only: `status` uses it and must start fast.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import hashlib
import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

from .errors import UsageError
from .faults import checkpoint

TMP_SUFFIX = ".vsp-tmp"
# What hash_file answers for a FIFO, a socket or a device where a file should be: equal to no hash.
NOT_A_FILE = "not a regular file"
_NO_LINKS = os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


def record_hash(data: bytes) -> str:
    """The hash as pip writes it in RECORD: sha256, urlsafe base64, no padding."""
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def hash_file(path: Path) -> str | None:
    """The RECORD hash of the file, None when there is none, NOT_A_FILE for a FIFO or a device
    (read without blocking: a FIFO planted in a package must not hang `status`)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except (FileNotFoundError, NotADirectoryError):  # gone, or a folder above it replaced by a file
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return NOT_A_FILE
    with os.fdopen(fd, "rb") as f:
        return record_hash(f.read())


def read_private(path: Path) -> bytes | None:
    """A file of the state dir, never through a link and never blocking on a FIFO; None if absent."""
    try:
        fd = os.open(path, os.O_RDONLY | _NO_LINKS)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OSError(errno.ELOOP, "a symbolic link, not a file this tool wrote", str(path)) from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file", str(path))
    with os.fdopen(fd, "rb") as f:
        return f.read()


def write_private(path: Path, data: bytes) -> None:
    """A scratch file of the state dir, created anew: a link planted in its place is removed, never followed."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NO_LINKS, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def plain_relative(path: str) -> bool:
    """A path as RECORD writes one for a file inside the install location: no `..`, `.`, empty or
    absolute part, no backslash or NUL (a journal or tree naming anything else is not ours)."""
    parts = path.split("/")
    return bool(path) and "\\" not in path and "\0" not in path and all(p not in ("", ".", "..") for p in parts)


def linked_part(root: Path, path: str) -> Path | None:
    """The first part of `root/path` below `root` that is a symbolic link, or None."""
    current = root
    for part in path.split("/"):
        current = current / part
        try:
            if stat.S_ISLNK(os.lstat(current).st_mode):
                return current
        except FileNotFoundError:
            return None
    return None


def absolute_path(path: str, option: str) -> str:
    """`path` made absolute against the current folder, which must still exist."""
    try:
        return os.path.abspath(os.path.expanduser(path))
    except FileNotFoundError:
        raise UsageError(f"{option} {path}: a relative path, but the current folder no longer exists: "
                         f"pass an absolute path or run from an existing folder") from None


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def atomic_write(path: Path, data: bytes, mode: int | None = None) -> None:
    """Temp file in the same folder, fsync, rename: a reader sees the old or the new bytes, never half."""
    try:
        st: os.stat_result | None = path.stat()
    except FileNotFoundError:
        st = None
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TMP_SUFFIX)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            checkpoint(f"write:flushed {path.name}")
            os.fsync(f.fileno())
        if st is not None:
            os.chmod(tmp, stat.S_IMODE(st.st_mode))
            if os.geteuid() == 0 and (st.st_uid, st.st_gid) != (0, 0):
                # Root patching a user's venv must not leave root-owned files behind.
                with contextlib.suppress(OSError):
                    os.chown(tmp, st.st_uid, st.st_gid)
        elif mode is not None:
            os.chmod(tmp, mode)
        checkpoint(f"write:temp ready {path.name}")
        os.replace(tmp, path)
        checkpoint(f"write:renamed {path.name}")
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(exc, OSError) and exc.filename is None:
            # A failed write names no file (ENOSPC from write or fsync): name the one we meant.
            raise OSError(exc.errno, exc.strerror, str(path)) from None
        raise
    _fsync_dir(path.parent)


def remove_stale_bytecode(path: Path) -> None:
    """Drop `__pycache__/<stem>.*.pyc` of a rewritten module so no interpreter runs the old code."""
    cache = path.parent / "__pycache__"
    if cache.is_dir():
        for pyc in cache.glob(f"{path.stem}.*.pyc"):
            # Python checks a .pyc against its source's mtime and size anyway: one we cannot
            # remove is a leftover, not a reason to stop halfway through a transaction.
            with contextlib.suppress(OSError):
                pyc.unlink()
            checkpoint(f"bytecode:removed {pyc.name}")


def remove_temp_files(folder: Path) -> None:
    """Temp files an interrupted atomic write left behind."""
    if folder.is_dir():
        for tmp in folder.glob(f".*{TMP_SUFFIX}"):
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()


def write_json(path: Path, data: Any) -> None:
    checkpoint(f"json:{path.name}")
    atomic_write(path, (json.dumps(data, indent=2, sort_keys=True) + "\n").encode(), mode=0o644)


def read_json(path: Path) -> Any:
    """The JSON a state file holds (None: no file), read without following a link."""
    data = read_private(path)
    return None if data is None else json.loads(data.decode())

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
import sys
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


def read_regular(path: Path, limit: int) -> bytes:
    """A file the user named (a --model's config.json): links followed (a Hugging Face cache's
    snapshot links to its blobs), but only a regular file of at most `limit` bytes is read; a FIFO
    is never waited on, a device or a folder never read. OSError otherwise, its strerror the words
    ("not a regular file (a FIFO)", "12 MB, more than the 4 MB a ... is allowed")."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        kind = ("a folder" if stat.S_ISDIR(st.st_mode) else "a FIFO" if stat.S_ISFIFO(st.st_mode)
                else "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else "a socket")
        raise OSError(errno.EINVAL, f"not a regular file ({kind})", str(path))
    with os.fdopen(fd, "rb") as f:
        data = f.read(limit + 1)
        if len(data) > limit:
            raise OSError(errno.EFBIG, f"{max(st.st_size, len(data))} bytes, more than the {limit} read of it",
                          str(path))
        return data


def write_private(path: Path, data: bytes) -> None:
    """A scratch file of the state dir, created anew: a link planted in its place is removed, never followed."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NO_LINKS, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def trust_fault(st: os.stat_result) -> str | None:
    """Why a file or folder (its lstat) must not be trusted, as data: "link", "owner" (another
    user's) or "writable" (by group or others); None when it may be. The overlay's trust check
    (`overlay/trust.py`) and the caches' (`read_trusted`) both ask this."""
    if stat.S_ISLNK(st.st_mode):
        return "link"
    if st.st_uid != os.geteuid():
        return "owner"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return "writable"
    return None


def fault_words(st: os.stat_result, fault: str) -> str:
    """`trust_fault`'s answer in words ("... is <words>")."""
    if fault == "link":
        return "a symbolic link"
    if fault == "owner":
        return f"owned by uid {st.st_uid} (you run as uid {os.geteuid()})"
    return f"writable by other users (mode {stat.S_IMODE(st.st_mode):04o})"


_said: set[str] = set()


def _say_once(line: str) -> None:
    if line not in _said:
        _said.add(line)
        sys.stderr.write(line + "\n")
        sys.stderr.flush()


def private_folder(path: Path) -> None:
    """Create `path` and the folders missing above it as 0700 whatever the umask (a cache: what is
    in it decides what the tool writes, so nobody else may write there); existing ones are left."""
    missing = []
    here = path
    while not here.exists() and not here.is_symlink():
        missing.append(here)
        if here.parent == here:
            break
        here = here.parent
    for folder in reversed(missing):
        with contextlib.suppress(FileExistsError):
            os.mkdir(folder, 0o700)
            os.chmod(folder, 0o700)  # mkdir's mode passes through the umask; chmod's does not


def trusted_folder(root: Path, folder: Path, what: str) -> bool:
    """Whether `folder` and every folder from the cache `root` down to it is this user's, writable by
    nobody else and no link (absent: trusted, nothing to read). Else say so, once, in one line on
    stderr (`what`: the cache it is), and answer False: nothing there is read or written."""
    parts = [root, *[root / Path(*folder.relative_to(root).parts[:n])
                     for n in range(1, len(folder.relative_to(root).parts) + 1)]]
    for part in parts:
        try:
            st = os.lstat(part)
        except FileNotFoundError:
            return True
        except OSError:
            return False
        fault = trust_fault(st)
        if fault is not None:
            _say_once(f"vllm-shim-patch: {what} at {root} is ignored: {part} is {fault_words(st, fault)} "
                      f"(remove it: rm -r {root})")
            return False
    return True


def read_trusted(root: Path, path: Path, what: str) -> bytes | None:
    """A cache entry's bytes: None when absent, unreadable, not a regular file, or not to be trusted
    (`trusted_folder`, and the file itself: this user's, writable by nobody else; said once)."""
    if not trusted_folder(root, path.parent, what):
        return None
    try:
        fd = os.open(path, os.O_RDONLY | _NO_LINKS)
    except OSError:
        return None  # absent, or a link (ELOOP): nothing this tool wrote
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            return None
        fault = trust_fault(st)
        if fault is not None:
            _say_once(f"vllm-shim-patch: {what} entry {path} is ignored: it is {fault_words(st, fault)} "
                      f"(remove it: rm {path})")
            return None
        try:
            return f.read()
        except OSError:
            return None


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

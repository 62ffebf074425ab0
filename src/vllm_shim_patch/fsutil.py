"""Byte-faithful file IO: RECORD-style hashes, atomic writes, stale bytecode removal.

Standard library only: `status` uses it and must start fast.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

from .faults import checkpoint

TMP_SUFFIX = ".vsp-tmp"


def record_hash(data: bytes) -> str:
    """The hash as pip writes it in RECORD: sha256, urlsafe base64, no padding."""
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def hash_file(path: Path) -> str | None:
    try:
        return record_hash(path.read_bytes())
    except FileNotFoundError:
        return None


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
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None

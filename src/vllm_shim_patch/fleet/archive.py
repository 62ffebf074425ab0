"""The wheel's zip, written so the same files give the same bytes, and never seen half-written.

Entries in a fixed order (the package's files sorted, then the dist-info's, RECORD last, as the
wheel format asks), every one with the same timestamp (1980-01-01, the earliest a zip can hold),
Unix permissions 0644 (a wheel installs no file executable but its scripts), deflated at one fixed
level. The bytes are then a function of the files and of zlib's deflate: a rebuild on another
machine is byte-identical where its zlib deflates the same way (the same zlib release does; a
zlib-ng build in zlib's place need not). The tool's JSON names the zlib it deflated with. Written to a temporary name in the output folder, flushed to disk and
renamed: a reader sees the whole wheel or none.
"""

from __future__ import annotations

import hashlib
import io
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ..fsutil import atomic_write

EPOCH = (1980, 1, 1, 0, 0, 0)
LEVEL = 9


@dataclass(frozen=True)
class Entry:
    name: str
    data: bytes


def order(entries: Iterable[Entry], dist_info: str) -> list[Entry]:
    """The package's files sorted, then the dist-info's sorted, its RECORD last."""
    record = f"{dist_info}/RECORD"

    def key(e: Entry) -> tuple[int, str]:
        if e.name == record:
            return (2, "")
        return (1 if e.name.startswith(dist_info + "/") else 0, e.name)

    return sorted(entries, key=key)


def zip_bytes(entries: list[Entry]) -> bytes:
    """The archive of `entries` in the order given."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        for e in entries:
            info = zipfile.ZipInfo(e.name, date_time=EPOCH)
            info.create_system = 3  # Unix: the permissions below are read as such
            info.external_attr = 0o100644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, e.data, compress_type=zipfile.ZIP_DEFLATED, compresslevel=LEVEL)
    return buffer.getvalue()


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write_atomic(folder: Path, name: str, data: bytes) -> Path:
    """`folder/name` holds `data`, or is as it was (fsutil's one atomic write: temp file, fsync,
    rename, the folder fsynced)."""
    atomic_write(folder / name, data, mode=0o644)
    return folder / name

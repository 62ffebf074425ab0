"""RECORD as the wheel format writes it: one CSV row per file (path, sha256, size), RECORD itself
with neither; and the check of an installed distribution's files against it."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ..fsutil import hash_file, plain_relative, record_hash


@dataclass(frozen=True)
class Row:
    path: str
    hash: str  # "" for RECORD itself (and the .pyc an installer adds, which it lists without one)
    size: str


def write(entries: Iterable[tuple[str, bytes]], record_path: str) -> bytes:
    """RECORD for `entries` (in their order), RECORD's own row last."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for path, data in entries:
        writer.writerow([path, record_hash(data), len(data)])
    writer.writerow([record_path, "", ""])
    return out.getvalue().encode()


def read(data: bytes) -> list[Row]:
    """The rows of a RECORD; a row that is not three fields is an error (ValueError)."""
    rows = []
    for fields in csv.reader(io.StringIO(data.decode("utf-8"))):
        if not fields:
            continue
        if len(fields) != 3:
            raise ValueError(f"a RECORD row of {len(fields)} fields: {fields!r}")
        rows.append(Row(*fields))
    return rows


def mismatches(root: Path, rows: Iterable[Row]) -> list[str]:
    """The files under `root` whose bytes are not what RECORD lists (missing ones included):
    rows without a hash are not checked, nor paths outside the install location."""
    return sorted(r.path for r in rows
                  if r.hash and plain_relative(r.path) and hash_file(root / r.path) != r.hash)

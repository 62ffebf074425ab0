"""Bytecode beside a patched module: which `.pyc` Python would run instead of the source.

A timestamp `.pyc` is checked against its source's mtime and size, a checked-hash one against
the source's hash: both are harmless once the source changed. An unchecked-hash `.pyc` (PEP 552)
is run without looking at the source, so one compiled from other bytes keeps the old code
running whatever the `.py` says.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

_HASH_BASED, _CHECK_SOURCE = 0b01, 0b10


@dataclass(frozen=True)
class Bytecode:
    path: str  # relative to the install location
    runs_instead: bool  # unchecked-hash bytecode not compiled from the source beside it


def beside(location: Path, relpaths: list[str]) -> list[Bytecode]:
    """Every `__pycache__/<stem>.*.pyc` of the modules `relpaths`, and whether it runs instead."""
    out = []
    for rel in relpaths:
        source = location / rel
        cache = source.parent / "__pycache__"
        if not rel.endswith(".py") or not cache.is_dir():
            continue
        for pyc in sorted(cache.glob(f"{source.stem}.*.pyc")):
            out.append(Bytecode(str(pyc.relative_to(location)), _runs_instead(pyc, source)))
    return out


def _runs_instead(pyc: Path, source: Path) -> bool:
    try:
        header = pyc.read_bytes()[:16]
        data = source.read_bytes()
    except OSError:
        return False  # unreadable for us: unreadable for the interpreter too
    if len(header) < 16:
        return False
    flags = int.from_bytes(header[4:8], "little")
    if not flags & _HASH_BASED or flags & _CHECK_SOURCE:
        return False
    # The hash is keyed by the magic number: only our own Python's can be confirmed as current.
    return not (header[:4] == importlib.util.MAGIC_NUMBER and header[8:16] == importlib.util.source_hash(data))

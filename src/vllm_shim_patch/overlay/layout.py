"""The overlay's on-disk layout, known only here (standard library only: `status` reads it).

One overlay folder per installed distribution, ``<state>/<dist>-<hash of its location>/``:

- ``git/``          the repository (``git --git-dir <overlay>/git log`` works as is)
- ``state.json``    the tracked files and their hashes at ``original`` and at HEAD, so ``status``
                    answers without git
- ``journal.json``  present only while files are being written: what the next command must
                    finish or undo after a crash
- ``lock``          held (flock) by the one process working on this package
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..fsutil import read_json

GIT_DIR = "git"
STATE_FILE = "state.json"
JOURNAL_FILE = "journal.json"
LOCK_FILE = "lock"
STATE_FORMAT = 1


def state_root(state_dir: str | None) -> Path:
    if state_dir:
        return Path(state_dir).expanduser()
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "vllm-shim-patch"


def overlay_path(root: Path, package: str, location: Path) -> Path:
    digest = hashlib.sha256(str(location).encode()).hexdigest()[:12]
    return root / f"{package.lower().replace('_', '-')}-{digest}"


def tracked_paths(record_paths: Iterable[str]) -> list[str]:
    """The files of the distribution the overlay records: RECORD minus bytecode and outside paths."""
    return sorted(
        p for p in record_paths
        if not p.startswith("..") and not p.startswith("/") and "__pycache__/" not in p and not p.endswith(".pyc")
    )


@dataclass(frozen=True)
class State:
    """state.json: what the overlay last recorded (a cache of git, rebuilt by each command)."""

    data: dict[str, Any]

    @property
    def head(self) -> dict[str, str | None]:
        return dict(self.data["head"])

    @property
    def original(self) -> dict[str, str | None]:
        return dict(self.data["original"])

    @property
    def files(self) -> list[str]:
        return list(self.data["files"])


def read_state(overlay: Path) -> State | None:
    data = read_json(overlay / STATE_FILE)
    return State(data) if data else None


def read_journal(overlay: Path) -> dict[str, Any] | None:
    data = read_json(overlay / JOURNAL_FILE)
    return data if isinstance(data, dict) else None

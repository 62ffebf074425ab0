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

from ..errors import StateDirError
from ..fsutil import read_json

GIT_DIR = "git"
STATE_FILE = "state.json"
JOURNAL_FILE = "journal.json"
LOCK_FILE = "lock"
STATE_FORMAT = 1


# Folders that hold installed packages: an overlay there would be read, copied or deleted with them.
_PACKAGE_DIRS = frozenset({"site-packages", "dist-packages"})


def state_root(state_dir: str | None) -> Path:
    """The state dir, absolute (a relative one is taken from the current folder, once, here)."""
    if state_dir:
        return Path(os.path.abspath(Path(state_dir).expanduser()))
    xdg = os.environ.get("XDG_STATE_HOME")
    if xdg:
        return Path(os.path.abspath(xdg)) / "vllm-shim-patch"
    try:
        home = Path.home()
    except (RuntimeError, KeyError):
        raise StateDirError("cannot find your home folder (HOME is not set): set XDG_STATE_HOME or pass "
                            "--state-dir") from None
    if not home.is_dir():
        raise StateDirError(f"HOME {home} is not a folder: set HOME or XDG_STATE_HOME, or pass --state-dir")
    return Path(os.path.abspath(home)) / ".local" / "state" / "vllm-shim-patch"


def check_state_root(root: Path, location: Path) -> None:
    """Refuse a state dir that cannot hold an overlay, before anything reads or writes under it."""
    existing = root
    while not os.path.lexists(existing) and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        what = "is not a folder" if existing == root else f"cannot be created: {existing} is not a folder"
        raise StateDirError(f"state dir {root} {what}: pass --state-dir with a folder (or fix XDG_STATE_HOME)")
    real = Path(os.path.realpath(root))
    package_dir = next((part for part in real.parts if part in _PACKAGE_DIRS), None)
    inside = real == location or location in real.parents
    if package_dir or inside:
        where = f"the target's {location}" if inside else package_dir
        raise StateDirError(f"state dir {root} is inside {where}: the overlay must live outside installed "
                            f"packages; pass --state-dir with a folder elsewhere")


def overlay_for(state_dir: str | None, package: str, location: Path) -> Path:
    """The overlay folder of an installed distribution, its state dir checked."""
    root = state_root(state_dir)
    check_state_root(root, location)
    return overlay_path(root, package, location)


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

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

from ..errors import DamagedOverlayError, StateDirError
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
    data = _read(overlay / STATE_FILE)
    if data is None:
        return None
    _expect(overlay / STATE_FILE, data, {"files": list, "head": dict, "original": dict, "head_commit": str,
                                         "original_commit": str, "trailers": dict, "version": str, "package": str})
    if not all(isinstance(p, str) for p in data["files"]) or not all(
        isinstance(k, str) and (v is None or isinstance(v, str))
        for key in ("head", "original", "trailers") for k, v in data[key].items()
    ):
        raise DamagedOverlayError(f"{overlay / STATE_FILE} is damaged (an entry of the wrong type)")
    return State(data)


def read_journal(overlay: Path) -> dict[str, Any] | None:
    path = overlay / JOURNAL_FILE
    data = _read(path)
    if data is None:
        return None
    _expect(path, data, {"op": str, "base_commit": str, "files": dict})
    if data["op"] not in ("apply", "rollback"):
        raise DamagedOverlayError(f"{path} is damaged (unknown operation {data['op'][:40]!r})")
    if data["op"] == "rollback":
        _expect(path, data, {"to_commit": str, "message": str})
    for name, entry in data["files"].items():
        if not (isinstance(entry, dict) and isinstance(entry.get("after"), str)
                and (entry.get("before") is None or isinstance(entry.get("before"), str))):
            raise DamagedOverlayError(f"{path} is damaged (the entry of {str(name)[:80]!r} is of the wrong shape)")
    return data


def _read(path: Path) -> Any:
    """The file's JSON, or None when there is no file; an unreadable one is a damaged overlay."""
    try:
        return read_json(path)
    except (OSError, ValueError) as exc:
        why = "empty" if isinstance(exc, ValueError) and _is_empty(path) else (
            f"not JSON: {exc}" if isinstance(exc, ValueError) else f"unreadable: {exc.strerror or exc}")
        raise DamagedOverlayError(f"{path} is damaged ({why})") from None


def _is_empty(path: Path) -> bool:
    try:
        return path.stat().st_size == 0
    except OSError:
        return False


def _expect(path: Path, data: Any, keys: dict[str, type]) -> None:
    if not isinstance(data, dict):
        raise DamagedOverlayError(f"{path} is damaged (a JSON {type(data).__name__}, not an object)")
    for key, kind in keys.items():
        if not isinstance(data.get(key), kind):
            raise DamagedOverlayError(f"{path} is damaged ({key!r} is missing or not a {kind.__name__})")

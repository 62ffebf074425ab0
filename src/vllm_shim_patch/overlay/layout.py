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

import errno
import hashlib
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import DamagedOverlayError, StateDirError, TargetError
from ..fsutil import absolute_path, plain_relative, read_json

GIT_DIR = "git"
STATE_FILE = "state.json"
JOURNAL_FILE = "journal.json"
LOCK_FILE = "lock"
STATE_FORMAT = 1
# Every name this tool writes in an overlay folder (scratch files included): anything else is not ours.
OWN_ENTRIES = frozenset({GIT_DIR, STATE_FILE, JOURNAL_FILE, LOCK_FILE, "pathspec", "no-hooks", "index.partial",
                         "blob.partial"})
# A distribution name as PEP 508 allows it: the overlay folder is named after it.
_DIST_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?")
_NAME_MAX = 255


# Folders that hold installed packages: an overlay there would be read, copied or deleted with them.
_PACKAGE_DIRS = frozenset({"site-packages", "dist-packages"})


def state_root(state_dir: str | None) -> Path:
    """The state dir, absolute (a relative one is taken from the current folder, once, here)."""
    if state_dir:
        return Path(absolute_path(state_dir, "--state-dir"))
    xdg = os.environ.get("XDG_STATE_HOME")
    if xdg:
        return Path(absolute_path(xdg, "XDG_STATE_HOME")) / "vllm-shim-patch"
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
    long = next((part for part in root.parts if len(os.fsencode(part)) > _NAME_MAX), None)
    if long is not None:
        raise StateDirError(f"state dir {root}: the folder name {long[:40]!r}... is {len(os.fsencode(long))} bytes "
                            f"long, more than the {_NAME_MAX} a filesystem allows: pass --state-dir with a shorter "
                            f"path")
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
    if not _DIST_NAME.fullmatch(package):
        # The name comes from the installed METADATA: `../../x` must not place a folder outside the state dir.
        raise TargetError(f"the installed METADATA names the distribution {package[:80]!r}, which is not a valid "
                          f"distribution name: reinstall it with pip; nothing was written")
    # The bytes of the path, as the filesystem has them: a non-ASCII location under LC_ALL=C is the same folder.
    digest = hashlib.sha256(os.fsencode(str(location))).hexdigest()[:12]
    return root / f"{package.lower().replace('_', '-')}-{digest}"


def tracked_paths(record_paths: Iterable[str]) -> list[str]:
    """The files of the distribution the overlay records: RECORD minus bytecode and any path that is
    not a plain one inside the install location (`../../bin/x`, `pkg/../evil.pth`), each once."""
    return sorted({
        p for p in record_paths
        if plain_relative(p) and "__pycache__/" not in p and not p.endswith(".pyc")
    })


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
    # The `local` hand edits (optional): what `original_bytes` plans from must be of the right shape too.
    if "local_commit" in data and not (
        isinstance(data["local_commit"], str) and isinstance(data.get("local"), dict)
        and all(isinstance(k, str) and (v is None or isinstance(v, str)) for k, v in data["local"].items())
        and isinstance(data.get("local_files"), list) and all(isinstance(p, str) for p in data["local_files"])
    ):
        raise DamagedOverlayError(f"{overlay / STATE_FILE} is damaged (its 'local' entries are of the wrong type)")
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
        if not plain_relative(name):
            raise DamagedOverlayError(f"{path} is damaged (it names {name[:80]!r}, not a path inside the package)")
    return data


def _read(path: Path) -> Any:
    """The file's JSON, or None when there is no file; an unreadable one is a damaged overlay."""
    try:
        return read_json(path)
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            raise StateDirError(f"cannot read {path}: a name in it is too long for the filesystem: pass "
                                f"--state-dir with a shorter path") from None
        raise DamagedOverlayError(f"{path} is damaged (unreadable: {exc.strerror or exc})") from None
    except ValueError as exc:
        why = "empty" if _is_empty(path) else f"not JSON: {exc}"
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

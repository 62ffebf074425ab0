"""The pristine bytes of files edited by hand before the overlay first recorded the package.

Looked for in order: `--wheel PATH`, a wheel in pip's cache (its `wheels/` folder and the raw
bodies of its `http-v2/` cache), an unpacked wheel in uv's cache, then the package index
(`pip download --no-deps`, unless `--no-index`). Every file taken is checked against the sha256
the installed RECORD lists before it is used: a source that holds other bytes is not used at all.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import UsageError
from ..fsutil import record_hash
from ..interrupts import temp_dir

if TYPE_CHECKING:
    from ..settings import Log
    from ..target import Target

# `pip download` gives up this soon: offline, apply must fail over to the next step, not hang.
_INDEX_TIMEOUT_S = 120
# Raw bodies in pip's http cache are scanned up to this many (a cache of years holds thousands).
_HTTP_BODIES_MAX = 20000
_ZIP_MAGIC = b"PK\x03\x04"


@dataclass(frozen=True)
class Pristine:
    """RECORD-exact bytes of the edited files, and where they came from (said in the output and
    the overlay's commit)."""

    source: str
    files: dict[str, bytes]


@dataclass(frozen=True)
class NotFound:
    """Nothing held RECORD-exact bytes of every edited file: `searched` says where it looked."""

    searched: str


Finder = Callable[[list[str]], "Pristine | NotFound"]


def dist_info(target: Target) -> str:
    """The installed `.dist-info` folder's name (a wheel of the same release has the same)."""
    for entry in target.record:
        head, _, rest = entry.path.partition("/")
        if head.endswith(".dist-info") and rest == "RECORD":
            return head
    return f"{target.package.replace('-', '_')}-{target.version}.dist-info"


def _exact(target: Target, paths: list[str], read: Callable[[str], bytes | None]) -> tuple[dict[str, bytes], str | None]:
    """The bytes `read` gives for each path if all are RECORD's; else ({}, the first path that is not)."""
    record = {e.path: e.hash for e in target.record}
    out = {}
    for path in paths:
        data = read(path)
        if data is None:
            return {}, f"{path} is not in it"
        if record_hash(data) != record.get(path):
            return {}, f"{path} in it does not match the installed RECORD's sha256"
        out[path] = data
    return out, None


def _from_zip(path: Path, target: Target, paths: list[str]) -> tuple[dict[str, bytes], str | None]:
    """(the files, None) from a wheel of the installed release, or ({}, why not)."""
    wanted = dist_info(target)
    try:
        with zipfile.ZipFile(path) as zf:
            names = set(zf.namelist())
            if f"{wanted}/RECORD" not in names:
                found = sorted({n.split("/", 1)[0] for n in names if n.split("/", 1)[0].endswith(".dist-info")})
                what = found[0].removesuffix(".dist-info").replace("-", " ") if found else "not a wheel"
                return {}, f"it is {what}, but {target.package} {target.version} is installed"

            def read(p: str) -> bytes | None:
                return zf.read(p) if p in names else None

            return _exact(target, paths, read)
    except (OSError, zipfile.BadZipFile, EOFError) as exc:
        return {}, f"cannot read it as a wheel ({exc})"


def from_wheel(wheel: str, target: Target, paths: list[str]) -> Pristine:
    """`--wheel PATH`: the user named it, so anything wrong with it is exit 2, nothing written."""
    path = Path(wheel)
    if not path.is_file():
        raise UsageError(f"--wheel {wheel}: no such file (give the {target.package} {target.version} wheel); "
                         f"nothing was written")
    files, why = _from_zip(path, target, paths)
    if why is not None:
        raise UsageError(f"--wheel {wheel}: {why}; give the {target.package} {target.version} wheel the "
                         f"package was installed from; nothing was written")
    return Pristine(f"--wheel {wheel}", files)


def check_wheel(wheel: str, target: Target) -> None:
    """Before the lock: a --wheel that is missing or of another release is refused at once."""
    from_wheel(wheel, target, [])


def _pip_cache_dir() -> Path | None:
    env = os.environ.get("PIP_CACHE_DIR")
    if env:
        return Path(env)
    try:
        proc = subprocess.run([sys.executable, "-m", "pip", "cache", "dir"], capture_output=True, text=True,
                              timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        proc = None
    if proc is not None and proc.returncode == 0 and proc.stdout.strip():
        return Path(proc.stdout.strip().splitlines()[-1])
    # pip is not importable here (or its cache is off): its default place, in case another pip filled it.
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pip"


def _uv_cache_dir() -> Path:
    env = os.environ.get("UV_CACHE_DIR")
    return Path(env) if env else Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "uv"


_Reader = Callable[[list[str]], "tuple[dict[str, bytes], str | None]"]


def _zip_reader(path: Path, target: Target) -> _Reader:
    return lambda paths: _from_zip(path, target, paths)


def _cached(target: Target) -> Iterator[tuple[str, _Reader]]:
    """(label, reader) for every cached copy of the installed release, cheapest first."""
    for label, path, folder in _cache_copies(target):
        if not folder:
            yield label, _zip_reader(path, target)
            continue

        def read_folder(paths: list[str], root: Path = path) -> tuple[dict[str, bytes], str | None]:
            def read(p: str) -> bytes | None:
                try:
                    return (root / p).read_bytes()
                except OSError:
                    return None

            return _exact(target, paths, read)

        yield label, read_folder


def _download(target: Target, folder: str, log: Log) -> tuple[Path | None, str]:
    """(the installed release's wheel `pip download` put in `folder`, or None; what happened)."""
    spec = f"{target.package}=={target.version}"
    # `pip --python`: the target's tags and pip configuration (its index), the tool's own pip.
    command = [sys.executable, "-m", "pip", "--python", target.python, "download", "--quiet", "--no-deps",
               "--only-binary=:all:", "--retries", "0", "--timeout", "15", "-d", folder, spec]
    log(f"looking for the pristine {target.package} {target.version} on the package index (pip download "
        f"{spec}; --no-index skips it)")
    # pip's own temp folders inside ours (`folder`, removed with it), and pip in a process group
    # killed whole when it ends: pip killed by an interrupt cannot remove its own, and `pip
    # --python` runs a second pip that would outlive the first.
    from ..target import run_grouped

    tmp = Path(folder) / ".tmp"
    tmp.mkdir(exist_ok=True)
    try:
        proc = run_grouped(command, stdin=None, timeout=_INDEX_TIMEOUT_S, cwd=None,
                           env={**os.environ, "TMPDIR": str(tmp)})
    except subprocess.TimeoutExpired:
        return None, f"the package index did not answer within {_INDEX_TIMEOUT_S} s"
    except OSError as exc:
        return None, f"pip could not run ({exc.strerror or exc})"
    if proc.returncode != 0:
        errors = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip()]
        last = next((ln for ln in reversed(errors) if ln.startswith("ERROR:")), errors[-1] if errors else "")
        return None, f"pip download {spec} failed: {last.removeprefix('ERROR: ') or f'exit {proc.returncode}'}"
    for whl in sorted(Path(folder).glob("*.whl")):
        return whl, ""
    return None, f"pip download {spec} gave no wheel"


def _from_index(target: Target, paths: list[str], log: Log) -> tuple[Pristine | None, str]:
    """(the files from `pip download`, or None; what happened, for the message)."""
    spec = f"{target.package}=={target.version}"
    with temp_dir("vsp-pristine-") as tmp:
        whl, failed = _download(target, tmp, log)
        if whl is None:
            return None, failed
        files, why = _from_zip(whl, target, paths)
        if why is None:
            return Pristine(f"the package index (pip download {spec}: {whl.name})", files), ""
        return None, f"the package index's {whl.name}: {why}"


def finder(target: Target, wheel: str | None, use_index: bool, log: Log) -> Finder:
    """The pristine-bytes search apply runs for the files that differ from RECORD, in order."""

    def find(paths: list[str]) -> Pristine | NotFound:
        if wheel is not None:
            return from_wheel(wheel, target, paths)
        for label, read in _cached(target):
            files, why = read(paths)
            if why is None:
                return Pristine(label, files)
            log(f"not the pristine {target.package} {target.version}: {label}: {why}")
        searched = "no --wheel, none in the pip or uv cache"
        if not use_index:
            return NotFound(f"{searched}, the package index not asked (--no-index)")
        found, why = _from_index(target, paths, log)
        return found if found is not None else NotFound(f"{searched}, {why}")

    return find


# ------------------------------------------------------------------ the whole original wheel


@dataclass(frozen=True)
class OriginalWheel:
    """Every file of the wheel the installed release came from (its RECORD included), each but
    RECORD checked against the sha256 the installed RECORD lists, and where it was found."""

    source: str
    files: dict[str, bytes]


def _whole_zip(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as zf:
        return {n: zf.read(n) for n in zf.namelist() if not n.endswith("/")}


def _whole_folder(root: Path, info: str) -> dict[str, bytes]:
    """An unpacked wheel (uv's cache): the files its own RECORD lists."""
    import csv
    import io

    listed = (root / info / "RECORD").read_text(encoding="utf-8")
    return {row[0]: (root / row[0]).read_bytes() for row in csv.reader(io.StringIO(listed)) if row}


def _installed_from(target: Target) -> Path | None:
    """The local wheel file the installer recorded in direct_url.json, when it is still there."""
    import json
    from urllib.parse import unquote, urlparse

    try:
        data = json.loads((target.location / dist_info(target) / "direct_url.json").read_text())
    except (OSError, ValueError):
        return None
    url = data.get("url") if isinstance(data, dict) else None
    if not isinstance(url, str) or not url.startswith("file://") or not url.endswith(".whl"):
        return None
    path = Path(unquote(urlparse(url).path))
    return path if path.is_file() else None


def _whole_mismatch(target: Target, files: dict[str, bytes]) -> str | None:
    """Why `files` are not the installed release's wheel (None: they are)."""
    info = dist_info(target)
    if f"{info}/RECORD" not in files:
        return f"it holds no {info}/RECORD"
    record = {e.path: e.hash for e in target.record}
    for path, data in sorted(files.items()):
        if path == f"{info}/RECORD":
            continue
        if path not in record:
            return f"{path} in it is not installed"
        if record_hash(data) != record[path]:
            return f"{path} in it does not match the installed RECORD's sha256"
    for path in target.python_files():
        if path not in files:
            return f"{path}, installed, is not in it"
    return None


def _candidates(target: Target) -> Iterator[tuple[str, Path, bool]]:
    """(label, path, whether it is an unpacked folder) of every local copy of the release's wheel."""
    here = _installed_from(target)
    if here is not None:
        yield f"the wheel it was installed from ({here})", here, False
    yield from _cache_copies(target)


def _cache_copies(target: Target) -> Iterator[tuple[str, Path, bool]]:
    """(label, path, whether it is an unpacked folder) of the release's wheel in pip's and uv's
    caches, cheapest first: pip's built wheels, uv's unpacked archives, pip's HTTP bodies."""
    info = dist_info(target)
    stem = info.removesuffix(".dist-info").lower()
    pip = _pip_cache_dir()
    if pip is not None and (pip / "wheels").is_dir():
        for whl in sorted((pip / "wheels").rglob("*.whl")):
            if whl.name.lower().startswith(stem + "-"):
                yield f"the pip cache ({whl})", whl, False
    uv = _uv_cache_dir()
    if uv.is_dir():
        # uv keeps each wheel unpacked under archive-v*/<id>/, its dist-info folder as installed.
        for folder in sorted(uv.glob(f"archive-v*/*/{info}")):
            yield f"the uv cache ({folder.parent})", folder.parent, True
    for body in _http_bodies(pip, info):
        yield f"the pip cache ({body})", body, False


def _http_bodies(pip: Path | None, info: str) -> Iterator[Path]:
    """The wheels pip's HTTP cache holds for the dist-info `info` (pip >= 23.3 keeps each
    response's body as is in a `.body` file: a wheel's is the wheel), at most _HTTP_BODIES_MAX
    bodies looked at."""
    if pip is None or not (pip / "http-v2").is_dir():
        return
    for n, body in enumerate(sorted((pip / "http-v2").rglob("*.body"))):
        if n >= _HTTP_BODIES_MAX:
            break
        try:
            with body.open("rb") as f:
                if f.read(4) != _ZIP_MAGIC:
                    continue
            with zipfile.ZipFile(body) as zf:
                if f"{info}/RECORD" not in zf.namelist():
                    continue
        except (OSError, zipfile.BadZipFile, EOFError):
            continue
        yield body


def _read_whole(path: Path, folder: bool, target: Target) -> tuple[dict[str, bytes], str | None]:
    try:
        files = _whole_folder(path, dist_info(target)) if folder else _whole_zip(path)
    except (OSError, zipfile.BadZipFile, EOFError, UnicodeDecodeError) as exc:
        return {}, f"cannot read it ({exc})"
    return files, _whole_mismatch(target, files)


def original_wheel(target: Target, wheel: str | None, use_index: bool, log: Log) -> OriginalWheel:
    """The whole wheel of the installed release: `--wheel`, the wheel direct_url.json names, the
    pip and uv caches, then (`use_index`) the package index; each checked against the installed
    RECORD before it is used. A bad --wheel is a UsageError; nothing found a TargetError naming
    where it looked."""
    from ..errors import TargetError

    if wheel is not None:
        if not Path(wheel).is_file():
            raise UsageError(f"--wheel {wheel}: no such file (give the {target.package} {target.version} wheel); "
                             f"nothing was written")
        files, why = _read_whole(Path(wheel), False, target)
        if why is not None:
            raise UsageError(f"--wheel {wheel}: {why}; give the {target.package} {target.version} wheel the "
                             f"package was installed from; nothing was written")
        return OriginalWheel(f"--wheel {wheel}", files)
    for label, path, folder in _candidates(target):
        files, why = _read_whole(path, folder, target)
        if why is None:
            return OriginalWheel(label, files)
        log(f"not the original {target.package} {target.version} wheel: {label}: {why}")
    searched = "no --wheel, none in the pip or uv cache"
    if not use_index:
        searched += ", the package index not asked (--no-index)"
    else:
        with temp_dir("vsp-original-") as tmp:
            whl, why_not = _download(target, tmp, log)
            if whl is not None:
                files, why = _read_whole(whl, False, target)
                if why is None:
                    return OriginalWheel(f"the package index (pip download {target.package}=={target.version}: "
                                         f"{whl.name})", files)
                why_not = f"the package index's {whl.name}: {why}"
        searched += f", {why_not}"
    raise TargetError(f"cannot find the wheel {target.package} {target.version} was installed from ({searched}): "
                      f"pass --wheel PATH with it (pip download --no-deps {target.package}=={target.version}); "
                      f"nothing was written")

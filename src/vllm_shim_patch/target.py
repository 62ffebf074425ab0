"""The target: the installed package and vLLM in the ML environment's interpreter."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from .errors import TargetError

REMOTE = Path(__file__).parent / "_remote"
PROBE_TIMEOUT = 60.0


@dataclass(frozen=True)
class RecordEntry:
    path: str  # as written in RECORD, relative to the install location
    hash: str | None  # "sha256=<urlsafe base64, no padding>"
    size: int | None


@dataclass(frozen=True)
class Target:
    python: str
    python_version: str
    package: str
    version: str
    location: Path  # the site-packages folder RECORD paths are relative to
    record: tuple[RecordEntry, ...]
    editable: str | None  # the project URL of an editable install
    vllm_version: str | None
    vllm_location: Path | None

    def python_files(self) -> list[str]:
        """The package's own .py files (RECORD paths), the only files the engine may edit."""
        return sorted(
            e.path
            for e in self.record
            if e.path.endswith(".py") and not e.path.startswith("..") and ".dist-info/" not in e.path
        )


def resolve_python(python: str | None) -> str:
    if not python:
        return sys.executable
    path = Path(python).expanduser()
    if path.is_dir():
        # A venv folder: take its interpreter, as the user almost certainly meant.
        for cand in (path / "bin" / "python", path / "Scripts" / "python.exe"):
            if cand.exists():
                return str(cand)
    if not path.exists() and path.parent == Path("."):
        found = shutil.which(python)
        if found:
            return found
    return str(path)


def run_remote(python: str, script: str, *args: str, stdin: str | None = None,
               timeout: float = PROBE_TIMEOUT, cwd: str | None = None,
               env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run one of our stdlib-only scripts in the target interpreter."""
    # Our imports in the target must not leave bytecode (root-owned, when run as root) behind.
    env = {**(env if env is not None else os.environ), "PYTHONDONTWRITEBYTECODE": "1"}
    try:
        return subprocess.run(
            [python, str(REMOTE / script), *args],
            input=stdin, capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env,
        )
    except FileNotFoundError:
        raise TargetError(f"interpreter {python!r} not found (give --python the path of a python executable)") from None
    except PermissionError:
        raise TargetError(f"interpreter {python!r} is not executable") from None
    except OSError as exc:
        raise TargetError(f"cannot run interpreter {python!r}: {exc.strerror or exc}") from None
    except subprocess.TimeoutExpired:
        raise TargetError(f"interpreter {python!r} did not answer within {timeout:.0f}s") from None


def probe(python: str | None, package: str) -> Target:
    """Find `package` and vLLM in the interpreter through importlib.metadata, importing neither."""
    exe = resolve_python(python)
    proc = run_remote(exe, "probe_target.py", package)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise TargetError(f"interpreter {exe!r} failed to run the probe: {tail}")
    try:
        info = json.loads(proc.stdout)
    except ValueError:
        raise TargetError(f"interpreter {exe!r} gave an unreadable answer: {proc.stdout[:200]!r}") from None
    pkg = info["package"]
    if pkg is None:
        raise TargetError(
            f"{package} is not installed in {info['python']} (pass --python with the interpreter of your ML environment)"
        )
    if not pkg.get("has_record"):
        raise TargetError(f"{package} {pkg['version']} in {info['python']} has no RECORD: not installed by a wheel installer")
    vllm = info["vllm"]
    return Target(
        python=info["python"],
        python_version=info["python_version"],
        package=pkg["name"],
        version=pkg["version"],
        location=Path(pkg["location"]).resolve(),
        record=tuple(RecordEntry(f["path"], f["hash"], f["size"]) for f in pkg["files"]),
        editable=pkg["editable"],
        vllm_version=vllm["version"] if vllm else None,
        vllm_location=Path(vllm["location"]) if vllm else None,
    )


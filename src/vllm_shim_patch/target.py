"""The target: the installed package and vLLM in the ML environment's interpreter."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import TargetError, UsageError

REMOTE = Path(__file__).parent / "_remote"


def load_remote_package(private_name: str, *parts: str) -> Any:
    """A standard-library package of `_remote/` (`parts` below it) loaded by path under a private
    name, once a process: the tool reads the target's own definitions without importing the
    rehearsal's package (its `__init__` and vLLM stay on the target's side)."""
    import importlib.util

    loaded = sys.modules.get(private_name)
    if loaded is not None:
        return loaded
    folder = REMOTE.joinpath(*parts)
    spec = importlib.util.spec_from_file_location(private_name, folder / "__init__.py",
                                                  submodule_search_locations=[str(folder)])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[private_name] = module  # its relative imports find their package
    spec.loader.exec_module(module)
    return module
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
    # Each top-level package and the file the interpreter would import it from (None: not found).
    origins: tuple[tuple[str, str | None], ...] = ()
    # The package's unconditional requirements and the version installed of each (None: not
    # installed): what a rule's `requires:` guard is decided by.
    dependencies: tuple[tuple[str, str | None], ...] = ()

    def shadowed(self) -> list[tuple[str, str | None]]:
        """Top-level packages the interpreter would import from elsewhere than this install."""
        out: list[tuple[str, str | None]] = []
        for top, origin in self.origins:
            expected = os.path.realpath(self.location / top / "__init__.py")
            # None: found as a namespace, or not at all (its __init__.py deleted): that is said as missing.
            if origin is not None and os.path.realpath(origin) != expected:
                out.append((top, origin))
        return out

    def python_files(self) -> list[str]:
        """The package's own .py files (RECORD paths), the only files the engine may edit."""
        return sorted(
            e.path
            for e in self.record
            if e.path.endswith(".py") and not e.path.startswith("..") and ".dist-info/" not in e.path
        )


def resolve_python(python: str | None) -> str:
    if python is None:
        return sys.executable
    if not python.strip():
        # `--python "$ENV_PY"` with the variable unset: never fall back to the tool's own interpreter.
        raise UsageError("--python is empty: give the path of the ML environment's python (or its venv folder)")
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
               env: dict[str, str] | None = None, own_group: bool = False) -> subprocess.CompletedProcess[str]:
    """Run one of our stdlib-only scripts in the target interpreter (`own_group`: in a process
    group of its own, which is killed once the script ends: see `run_grouped`)."""
    # Our imports in the target must not leave bytecode (root-owned, when run as root) behind.
    env = {**(env if env is not None else os.environ), "PYTHONDONTWRITEBYTECODE": "1"}
    argv = [python, str(REMOTE / script), *args]
    try:
        if own_group:
            return run_grouped(argv, stdin=stdin, timeout=timeout, cwd=cwd, env=env)
        return subprocess.run(
            argv, input=stdin, capture_output=True, timeout=timeout, cwd=cwd, env=env,
            # Our scripts answer in ASCII JSON; anything else (a wrapper printing Latin-1, a
            # broken locale) must read as an unreadable answer, not crash the decoding.
            encoding="utf-8", errors="replace",
        )
    except FileNotFoundError:
        raise TargetError(f"interpreter {python!r} not found (give --python the path of a python executable)") from None
    except PermissionError:
        raise TargetError(f"interpreter {python!r} is not executable") from None
    except OSError as exc:
        raise TargetError(f"cannot run interpreter {python!r}: {exc.strerror or exc}") from None
    except subprocess.TimeoutExpired:
        raise TargetError(f"interpreter {python!r} did not answer within {timeout:.0f}s") from None


# How long the output of a finished group may still take to arrive (a process that left the group
# and holds the pipes: its output is given up, the answer is not).
_DRAIN_SECONDS = 10.0


def run_grouped(argv: list[str], *, stdin: str | None, timeout: float, cwd: str | None,
                env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run `argv` as the leader of a new process group and kill the whole group once it ends,
    however it ends (its answer, its crash, the timeout, an interrupt of ours): nothing it started
    is left behind. vLLM's worker processes stay in their parent's group, and a forked worker that
    outlives it would spin for ever (vLLM 0.12-0.16 under fork: its death pipe cannot fire) while
    holding the pipes, so the end of the script is its exit, not the end of its output."""
    from .interrupts import held

    proc: subprocess.Popen[str] | None = None
    out: list[str] = []
    err: list[str] = []
    try:
        with held():  # an interrupt now would leave a child whose pid we never learnt
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    cwd=cwd, env=env, encoding="utf-8", errors="replace", start_new_session=True)
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        readers = [threading.Thread(target=_read_all, args=(f, into), daemon=True)
                   for f, into in ((proc.stdout, out), (proc.stderr, err))]
        for r in readers:
            r.start()
        _feed(proc.stdin, stdin or "")
        proc.wait(timeout=timeout)
    finally:
        if proc is not None:
            _kill_group(proc.pid)
            proc.wait()
            _await_group(proc.pid)
    for r in readers:
        r.join(_DRAIN_SECONDS)
    return subprocess.CompletedProcess(argv, proc.returncode, "".join(out), "".join(err))


def _feed(stream: Any, text: str) -> None:
    try:
        with stream:
            stream.write(text)
    except BrokenPipeError:
        pass  # it ended before reading its request: its exit status says why


def _read_all(stream: Any, into: list[str]) -> None:
    with stream:
        into.append(stream.read())


def _kill_group(pgid: int) -> None:
    if not hasattr(os, "killpg"):  # not a POSIX system: the group is the script alone
        return
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return  # nothing is left in it


def _await_group(pgid: int) -> None:
    """Until the killed group is gone (bounded; its leader reaped first): its temp folder is removed
    next, and a worker still dying must not write into it after."""
    if not hasattr(os, "killpg"):
        return
    for _ in range(200):
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(0.01)


def json_answer(proc: subprocess.CompletedProcess[str]) -> dict[str, Any] | None:
    """The one JSON object a remote script printed, or None: it crashed, or something else answered."""
    try:
        answer = json.loads(proc.stdout)
    except ValueError:
        return None
    return answer if proc.returncode == 0 and isinstance(answer, dict) else None


def probe(python: str | None, package: str) -> Target:
    """Find `package` and vLLM in the interpreter through importlib.metadata, importing neither."""
    exe = resolve_python(python)
    proc = run_remote(exe, "probe_target.py", package, timeout=PROBE_TIMEOUT)
    if proc.returncode != 0:
        how = (f"killed by signal {-proc.returncode}" if proc.returncode < 0 else f"exit {proc.returncode}")
        tail = (proc.stderr.strip().splitlines() or [f"(no output, {how})"])[-1]
        raise TargetError(f"interpreter {exe!r} failed to run the probe: {tail}")
    try:
        info = json.loads(proc.stdout)
    except ValueError:
        raise TargetError(f"interpreter {exe!r} gave an unreadable answer: {proc.stdout[:200]!r}") from None
    try:
        return _target(info, package)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        # Something else answered (a wrapper script, a patched interpreter): not a guess to build on.
        raise TargetError(f"interpreter {exe!r} answered the probe with JSON of another shape "
                          f"({type(exc).__name__}: {exc}): pass --python with a plain Python interpreter") from None


def _str(value: object, optional: bool = False) -> str:
    if value is None and optional:
        return None  # type: ignore[return-value]
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {type(value).__name__}")
    return value


def _target(info: dict[str, Any], package: str) -> Target:
    if not isinstance(info, dict):
        raise TypeError(f"expected an object, got {type(info).__name__}")
    python = _str(info["python"])
    pkg = info["package"]
    if pkg is None:
        raise TargetError(
            f"{package} is not installed in {python} (pass --python with the interpreter of your ML environment)"
        )
    if not isinstance(pkg, dict):
        raise TypeError(f"'package' is a {type(pkg).__name__}")
    vllm = info["vllm"]
    for what, dist in ((package, pkg), ("vllm", vllm)):
        if dist is not None and (dist.get("name") is None or dist.get("version") is None):
            raise TargetError(
                f"{what} in {dist.get('location')} has a dist-info without METADATA (a broken install): "
                f"reinstall it with pip install --force-reinstall --no-deps {what}"
            )
    if not pkg.get("has_record"):
        raise TargetError(f"{package} {pkg['version']} in {python} has no RECORD: not installed by a wheel installer")
    files = pkg["files"]
    if not isinstance(files, list):
        raise TypeError(f"'files' is a {type(files).__name__}")
    record = []
    for f in files:
        size = f["size"]
        if size is not None and not isinstance(size, int):
            raise TypeError(f"size of {f['path']!r} is a {type(size).__name__}")
        record.append(RecordEntry(_str(f["path"]), _str(f["hash"], optional=True), size))
    if vllm is not None and not isinstance(vllm, dict):
        raise TypeError(f"'vllm' is a {type(vllm).__name__}")
    origins = pkg.get("origins") or {}
    if not isinstance(origins, dict):
        raise TypeError(f"'origins' is a {type(origins).__name__}")
    dependencies = pkg.get("dependencies") or {}
    if not isinstance(dependencies, dict):
        raise TypeError(f"'dependencies' is a {type(dependencies).__name__}")
    return Target(
        python=python,
        python_version=_str(info["python_version"]),
        package=_str(pkg["name"]),
        version=_str(pkg["version"]),
        location=Path(_str(pkg["location"])).resolve(),
        record=tuple(record),
        editable=_str(pkg["editable"], optional=True),
        vllm_version=_str(vllm["version"]) if vllm else None,
        vllm_location=Path(_str(vllm["location"])) if vllm else None,
        origins=tuple((_str(k), _str(v, optional=True)) for k, v in sorted(origins.items())),
        dependencies=tuple((_str(k), _str(v, optional=True)) for k, v in sorted(dependencies.items())),
    )


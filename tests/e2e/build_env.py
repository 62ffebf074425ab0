#!/usr/bin/env python3
"""Build (or reuse) the cached test virtualenv of the reference vLLM (realdata.REFERENCE_VLLM, 0.16.0).

Usage:
    python tests/e2e/build_env.py [--print-path] [--rebuild] [--python PYTHON]

The venv lives outside any repository, at

    ${VSP_TEST_CACHE:-~/.cache/vllm-shim-patch}/venvs/vllm-0.16.0-<sha12>/

where <sha12> is the first 12 hex digits of the sha256 of
constraints-vllm-0.16.0.txt (next to this script). It holds vllm==0.16.0 with
its full dependency closure (torch 2.9.1, CUDA build from PyPI: ~11 GB; it only
has to import on a CPU machine) plus speculators==0.3.0 installed --no-deps.

A venv is reused when its marker file holds the sha256 of the constraints file.
Otherwise it is built in a temporary sibling directory, checked with an import
test and against the constraints, and only then renamed into place, so a killed
build never leaves a venv that looks complete. Builds of the same venv are
serialised with a lock file.

The last line on stdout is the venv's python path; all progress and pip output
goes to stderr. --print-path keeps stdout to that one line (no summary).
Exit status is non-zero, with a message on stderr, on any failure.

Stdlib only; Linux/macOS (uses fcntl).
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# The releases are named once, in tests/realdata.py (standard library only, like this script).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from realdata import OLD_SPECULATORS, REFERENCE_VLLM  # noqa: E402

VLLM_VERSION = REFERENCE_VLLM
SPECULATORS_VERSION = OLD_SPECULATORS
REQUIRED_PYTHON = (3, 11)
# Installed together with vllm: what `import speculators.data_generation.
# vllm_hidden_states_generator` needs beyond vllm's own closure (loguru), and
# setuptools, which torch.utils.cpp_extension imports (Python 3.11 venvs ship it,
# but name it so the pin applies whichever way the venv was seeded).
EXTRA_PACKAGES = ["loguru", "setuptools"]
IMPORT_CHECK = (
    "import vllm.v1.request, vllm.v1.core.sched.scheduler, "
    "vllm.v1.core.kv_cache_utils, vllm.config; "
    "import speculators.data_generation.vllm_hidden_states_generator"
)
MARKER = ".vsp-constraints-sha256"
MIN_FREE_BYTES = 14 * 1024**3  # venv ~11 GB + pip's unpack/temp space

HERE = Path(__file__).resolve().parent
CONSTRAINTS = HERE / f"constraints-vllm-{VLLM_VERSION}.txt"
PYTHON_CANDIDATES = [
    "python3.11",
    "/root/.pyenv/versions/3.11.7/bin/python",
    "/usr/local/bin/python3.11",
    "/usr/bin/python3.11",
]


_LOCK_FDS: tuple[int, ...] = ()


class BuildError(Exception):
    pass


def log(msg: str) -> None:
    print(f"[build_env] {msg}", file=sys.stderr, flush=True)


def cache_root() -> Path:
    env = os.environ.get("VSP_TEST_CACHE")
    root = Path(env).expanduser() if env else Path.home() / ".cache" / "vllm-shim-patch"
    return root.resolve()


def python_version(exe: str) -> tuple[int, int] | None:
    try:
        out = subprocess.run(
            [exe, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True, text=True, timeout=60,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    major, minor = out.stdout.strip().split(".")
    return int(major), int(minor)


def find_python(explicit: str | None) -> str:
    want = "{}.{}".format(*REQUIRED_PYTHON)
    if explicit:
        candidates = [explicit]
    else:
        candidates = []
        if sys.version_info[:2] == REQUIRED_PYTHON:
            candidates.append(sys.executable)
        candidates += PYTHON_CANDIDATES
    tried = []
    for cand in candidates:
        exe = shutil.which(cand) or (cand if os.path.isfile(cand) else None)
        if not exe:
            tried.append(f"{cand}: not found")
            continue
        ver = python_version(exe)
        if ver == REQUIRED_PYTHON:
            return exe
        tried.append(f"{cand} ({exe}): " + (f"Python {ver[0]}.{ver[1]}" if ver else "does not run"))
    raise BuildError(
        f"need a Python {want} interpreter (the constraints were frozen on {want}); "
        f"tried: {'; '.join(tried)}. Pass --python or set VSP_PYTHON."
    )


def parse_pins(text: str) -> dict[str, str]:
    pins = {}
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", line)
        if not m:
            raise BuildError(f"{CONSTRAINTS.name}: not a 'name==version' pin: {raw!r}")
        pins[normalize(m.group(1))] = m.group(2)
    return pins


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    for var in ("PYTHONPATH", "PYTHONHOME", "PIP_USER", "PIP_TARGET", "PIP_PREFIX",
                "VIRTUAL_ENV", "PIP_REQUIRE_VIRTUALENV"):
        env.pop(var, None)
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env["PYTHONNOUSERSITE"] = "1"
    return env


def run(cmd: list[str], what: str, capture: bool = False) -> str:
    log(f"{what}: {' '.join(cmd)}")
    t0 = time.monotonic()
    # pip's output goes to our stderr so stdout stays clean for the path.
    # Children inherit the lock fd: if this script is SIGKILLed, an orphaned pip
    # keeps holding the lock, so the next build waits for it instead of deleting
    # the directory it is still writing to.
    proc = subprocess.run(
        cmd, env=child_env(), text=True, pass_fds=_LOCK_FDS,
        stdout=subprocess.PIPE if capture else sys.stderr,
        stderr=subprocess.STDOUT if capture else sys.stderr,
    )
    if proc.returncode != 0:
        detail = f"\n{proc.stdout}" if capture and proc.stdout else ""
        raise BuildError(f"{what} failed (exit {proc.returncode}){detail}")
    log(f"{what}: done in {time.monotonic() - t0:.1f}s")
    return proc.stdout if capture else ""


def relocate_scripts(venv: Path, old: Path, new: Path) -> None:
    """Rewrite absolute paths in bin/ (shebangs, activate scripts) old -> new."""
    shutil.rmtree(venv / "bin" / "__pycache__", ignore_errors=True)  # e.g. jp.py's
    old_b, new_b = str(old).encode(), str(new).encode()
    for entry in [venv / "pyvenv.cfg", *(venv / "bin").iterdir()]:
        if entry.is_symlink() or not entry.is_file():
            continue
        if entry.stat().st_size > 1024 * 1024:
            continue
        data = entry.read_bytes()
        if b"\0" in data[:4096] or old_b not in data:
            continue
        mode = entry.stat().st_mode
        entry.write_bytes(data.replace(old_b, new_b))
        os.chmod(entry, mode)


def check_freeze(py: Path, pins: dict[str, str]) -> None:
    out = run([str(py), "-m", "pip", "freeze", "--all", "--exclude", "pip"],
              "pip freeze", capture=True)
    installed = {}
    for line in out.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if "==" in line:
            name, ver = line.split("==", 1)
        elif " @ " in line:
            name, ver = line.split(" @ ", 1)[0], "(direct url)"
        else:
            name, ver = line, "(unknown)"
        installed[normalize(name)] = ver.strip()
    problems = []
    for name, ver in sorted(installed.items()):
        if name not in pins:
            problems.append(f"  {name}=={ver} installed but not pinned")
        elif pins[name] != ver:
            problems.append(f"  {name}: installed {ver}, pinned {pins[name]}")
    for name in sorted(set(pins) - set(installed)):
        problems.append(f"  {name}=={pins[name]} pinned but not installed")
    if problems:
        raise BuildError(
            f"the venv does not match {CONSTRAINTS.name} (it is the cache key, "
            "so it must list exactly what gets installed):\n" + "\n".join(problems)
        )


def is_complete(venv: Path, digest: str) -> bool:
    marker = venv / MARKER
    try:
        return marker.read_text().strip() == digest and (venv / "bin" / "python").exists()
    except OSError:
        return False


def build(base_python: str, tmp: Path, final_name: str, pins: dict[str, str]) -> None:
    py = tmp / "bin" / "python"
    run([base_python, "-m", "venv", "--prompt", final_name, str(tmp)], "create venv")
    pip = [str(py), "-m", "pip", "install", "--no-input", "--only-binary=:all:",
           "-c", str(CONSTRAINTS)]
    run(pip + [f"vllm=={VLLM_VERSION}", *EXTRA_PACKAGES], "install vllm")
    run(pip + ["--no-deps", f"speculators=={SPECULATORS_VERSION}"], "install speculators")
    check_freeze(py, pins)
    run([str(py), "-c", IMPORT_CHECK], "import check", capture=True)


def ensure_venv(base_python_arg: str | None, rebuild: bool) -> tuple[Path, str]:
    if not CONSTRAINTS.is_file():
        raise BuildError(f"constraints file missing: {CONSTRAINTS}")
    data = CONSTRAINTS.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    pins = parse_pins(data.decode())
    venvs = cache_root() / "venvs"
    name = f"vllm-{VLLM_VERSION}-{digest[:12]}"
    final = venvs / name

    if not rebuild and is_complete(final, digest):
        return final, "reused"

    venvs.mkdir(parents=True, exist_ok=True)
    lock_path = venvs / f".{name}.lock"
    with open(lock_path, "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"another build of {name} is running; waiting for its lock ({lock_path})")
            fcntl.flock(lock, fcntl.LOCK_EX)
        global _LOCK_FDS
        _LOCK_FDS = (lock.fileno(),)
        # Re-check under the lock: a concurrent build may have just finished.
        if not rebuild and is_complete(final, digest):
            return final, "reused"
        # We hold the lock, so leftovers of this name are from killed builds.
        for stale in venvs.glob(f".tmp-{name}-*"):
            log(f"removing leftover of an interrupted build: {stale}")
            shutil.rmtree(stale, ignore_errors=True)

        base_python = find_python(base_python_arg or os.environ.get("VSP_PYTHON"))
        free = shutil.disk_usage(venvs).free
        if free < MIN_FREE_BYTES and not os.environ.get("VSP_SKIP_DISK_CHECK"):
            raise BuildError(
                f"only {free / 1024**3:.1f} GiB free under {venvs}; the venv needs about "
                f"{MIN_FREE_BYTES / 1024**3:.0f} GiB while building "
                "(set VSP_SKIP_DISK_CHECK=1 to try anyway)"
            )
        log(f"building {final} with {base_python} (takes minutes; ~11 GB, downloads ~4.5 GB)")
        t0 = time.monotonic()
        tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{name}-", dir=venvs))
        try:
            build(base_python, tmp, name, pins)
            relocate_scripts(tmp, tmp, final)
            (tmp / MARKER).write_text(digest + "\n")
            os.chmod(tmp, 0o755)  # mkdtemp made it 0700
            if final.exists() or final.is_symlink():
                trash = Path(tempfile.mkdtemp(prefix=f".tmp-{name}-old-", dir=venvs))
                final.rename(trash / "venv")
                shutil.rmtree(trash, ignore_errors=True)
            tmp.rename(final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        # The venv was moved: check it still runs from its final place.
        run([str(final / "bin" / "pip"), "--version"], "post-move check", capture=True)
        log(f"built {final} in {time.monotonic() - t0:.0f}s")
        return final, "built"


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--print-path", action="store_true",
                    help="print only the venv's python path on stdout")
    ap.add_argument("--rebuild", action="store_true",
                    help="build a fresh venv even if a complete one exists")
    ap.add_argument("--python", metavar="PYTHON",
                    help=f"base interpreter (Python {'{}.{}'.format(*REQUIRED_PYTHON)}; "
                         "default: VSP_PYTHON, then python3.11)")
    args = ap.parse_args()
    # Turn SIGTERM/SIGHUP into KeyboardInterrupt so the temp dir gets removed
    # (subprocess.run kills a running pip first). SIGKILL leaves a .tmp-* dir,
    # which the next build removes under the lock; it never looks complete.
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _interrupt)
    try:
        venv, how = ensure_venv(args.python, args.rebuild)
    except BuildError as exc:
        print(f"build_env: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("build_env: interrupted; nothing was left in place", file=sys.stderr)
        return 130
    py = venv / "bin" / "python"
    if not args.print_path:
        log(f"venv {how}: {venv}")
    print(py)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Shared helpers for the benchmarks in this folder (standard library only).

Everything the benchmarks build (venvs, wheels) is cached under
``$VSP_BENCH_CACHE`` (default ``~/.cache/vllm-shim-patch/bench``), never inside the repository.
Each cached item is built in place and marked complete last, so an interrupted build is simply
rebuilt by the next run; a lock file serialises concurrent runs.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import fcntl
import hashlib
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

REPO = Path(__file__).resolve().parent.parent
BENCH = Path(__file__).resolve().parent
CACHE = Path(os.environ.get("VSP_BENCH_CACHE", Path.home() / ".cache" / "vllm-shim-patch" / "bench"))

SPECULATORS_VERSION = "0.3.0"
BOWLER_REQUIREMENT = "bowler==0.9.0"  # the same pin as pyproject's optional `bench` extra

PY_TAG = f"{sys.implementation.name}{sys.version_info.major}{sys.version_info.minor}"


def die(message: str) -> NoReturn:
    """A usage error or a set-up that cannot be made: exit 2."""
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def fail(message: str) -> NoReturn:
    """A contender failed, or printed nothing: the bench stops with exit 1 and reports no time and
    no ratio (the time of a failure says nothing of the tool's speed)."""
    sys.stderr.flush()
    print(f"\nFAILED: {message}; no times reported", flush=True)
    raise SystemExit(1)


# --------------------------------------------------------------------------- cache and venvs


@contextlib.contextmanager
def cache_lock() -> Iterator[None]:
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def _venv_ok(venv: Path, marker_text: str) -> bool:
    marker = venv / ".bench-complete"
    if not marker.is_file() or marker.read_text() != marker_text:
        return False
    try:
        subprocess.run([str(venv_python(venv)), "-c", "pass"], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return False  # e.g. the base interpreter the venv points at is gone
    return True


def _pip(args: Sequence[str]) -> None:
    """pip of the interpreter running the benchmark, installing into another one (--python)."""
    cmd = [sys.executable, "-m", "pip", "--disable-pip-version-check", *args]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
    if proc.returncode != 0:
        die(f"{' '.join(cmd)} failed:\n{proc.stdout}")


def _build_venv(venv: Path, marker_text: str, install: Sequence[str]) -> Path:
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    _pip(["--python", str(venv_python(venv)), "install", "--quiet", *install])
    (venv / ".bench-complete").write_text(marker_text)
    return venv


def speculators_wheel() -> Path:
    """The real speculators wheel, through the test suite's cache (tests/realdata.py)."""
    realdata = REPO / "tests" / "realdata.py"
    if realdata.is_file():
        proc = subprocess.run([sys.executable, str(realdata), "speculators", SPECULATORS_VERSION],
                              capture_output=True, text=True, check=False)
        if proc.returncode == 0 and proc.stdout.strip():
            return Path(proc.stdout.strip().splitlines()[-1])
        print(f"note: tests/realdata.py failed ({proc.stderr.strip()[-300:]}); downloading directly",
              file=sys.stderr)
    wheels = CACHE / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    found = sorted(wheels.glob(f"speculators-{SPECULATORS_VERSION}-*.whl"))
    if not found:
        _pip(["download", "--quiet", "--no-deps", "--only-binary=:all:",
              f"speculators=={SPECULATORS_VERSION}", "-d", str(wheels)])
        found = sorted(wheels.glob(f"speculators-{SPECULATORS_VERSION}-*.whl"))
    if not found:
        die(f"no speculators {SPECULATORS_VERSION} wheel")
    return found[0]


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def speculators_venv() -> Path:
    """A pip-less venv holding the real speculators 0.3.0 (--no-deps): the target of the dry runs."""
    with cache_lock():
        wheel = speculators_wheel()
        venv = CACHE / f"venv-speculators-{SPECULATORS_VERSION}-{PY_TAG}"
        marker = f"{wheel.name} {sha256(wheel)} {sys.executable}\n"
        if not _venv_ok(venv, marker):
            print(f"setting up {venv} ...", file=sys.stderr)
            _build_venv(venv, marker, ["--no-deps", str(wheel)])
        return venv


def bowler_venv() -> Path:
    """A venv with Bowler (a benchmark-only dependency; never installed into the system python)."""
    with cache_lock():
        venv = CACHE / f"venv-{BOWLER_REQUIREMENT.replace('==', '-')}-{PY_TAG}"
        marker = f"{BOWLER_REQUIREMENT} {sys.executable}\n"
        if not _venv_ok(venv, marker):
            print(f"setting up {venv} ...", file=sys.stderr)
            _build_venv(venv, marker, [BOWLER_REQUIREMENT])
        return venv


def site_packages(python: Path) -> Path:
    out = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                         check=True, stdout=subprocess.PIPE, text=True).stdout.strip()
    return Path(out)


def ours_command() -> list[str]:
    """The installed `patch-speculators` console script itself, not a shim in front of it.

    pyenv's shims directory comes first on PATH and its shims are bash scripts that re-dispatch
    (tens of milliseconds): the script next to this interpreter is what a user's venv would run.
    """
    script = Path(sysconfig.get_path("scripts")) / "patch-speculators"
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    found = shutil.which("patch-speculators")
    if found:
        return [found]
    return [sys.executable, "-m", "vllm_shim_patch"]


def tool_env(**extra: str) -> dict[str, str]:
    """The environment for every timed process: no colour, no inherited PYTHONPATH."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONSTARTUP", "PYTHONPROFILEIMPORTTIME", "PYTHONDONTWRITEBYTECODE")}
    env.update(NO_COLOR="1", **extra)
    return env


# --------------------------------------------------------------------------- snapshots


def snapshot(root: Path) -> dict[str, tuple[int, int, str]]:
    """path → (size, mtime_ns, sha256) of every file under root (symlinks by target text)."""
    out: dict[str, tuple[int, int, str]] = {}
    for dirpath, _dirnames, filenames in os.walk(root):
        for name in filenames:
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            if p.is_symlink():
                out[rel] = (0, 0, "-> " + os.readlink(p))
                continue
            st = p.stat()
            out[rel] = (st.st_size, st.st_mtime_ns, sha256(p))
    return out


def snapshot_changes(before: dict, after: dict) -> list[str]:
    changes = [f"added {p}" for p in sorted(after.keys() - before.keys())]
    changes += [f"removed {p}" for p in sorted(before.keys() - after.keys())]
    changes += [f"modified {p}" for p in sorted(before.keys() & after.keys()) if before[p] != after[p]]
    return changes


# --------------------------------------------------------------------------- timing


@dataclass
class Contender:
    name: str
    cmd: list[str]
    env: dict[str, str] = field(default_factory=tool_env)
    cwd: str | None = None
    fresh_dir: bool = False  # substitute "{fresh}" in cmd with a new empty folder per run
    # Substitute "{cache}" in env's values with a new empty folder per run (a first run on a new
    # machine: nothing the tool keeps between runs is there).
    fresh_cache: bool = False
    ok_codes: tuple[int, ...] = (0,)  # exit codes that still count as a completed run
    times: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)  # user + system seconds of each timed run (its children too)
    # What its warm-up run gave (exit code, its stdout's lines sorted): every timed run must give
    # the same, or the bench fails (set by `warm_up`; None: only the exit code is checked).
    expected: tuple[int, list[str]] | None = None

    def argv(self, fresh: Path | None) -> list[str]:
        return [a.replace("{fresh}", str(fresh)) if fresh else a for a in self.cmd]

    def environ(self, scratch: Path) -> dict[str, str]:
        if not self.fresh_cache:
            return self.env
        cache = _fresh(scratch, "cache")
        return {k: v.replace("{cache}", str(cache)) for k, v in self.env.items()}

    @property
    def best(self) -> float:
        return min(self.times)

    @property
    def median(self) -> float:
        return statistics.median(self.times)


@dataclass
class Captured:
    returncode: int
    stdout: str
    stderr: str


def run_captured(c: Contender, scratch: Path) -> Captured:
    fresh = _fresh(scratch) if c.fresh_dir else None
    proc = subprocess.run(c.argv(fresh), env=c.environ(scratch), cwd=c.cwd, capture_output=True, text=True,
                          check=False)
    return Captured(proc.returncode, proc.stdout, proc.stderr)


_fresh_counter = 0


def _fresh(scratch: Path, kind: str = "fresh") -> Path:
    global _fresh_counter
    _fresh_counter += 1
    p = scratch / f"{kind}-{_fresh_counter}"
    p.mkdir(parents=True)
    return p


def warm_up(c: Contender, scratch: Path, require_output: bool = True) -> Captured:
    """The contender's first run, its output checked: an exit code outside `ok_codes`, or nothing
    on stdout where output is required, fails the bench. What it printed is what every timed run
    must print (the same lines; their order may vary, as a parallel codemod runner's does)."""
    out = run_captured(c, scratch)
    said = (out.stderr.strip().splitlines() or ["(nothing on stderr)"])[-1][-300:]
    if out.returncode not in c.ok_codes:
        print(out.stdout[-2000:], out.stderr[-4000:], sep="\n", file=sys.stderr)
        fail(f"{c.name} exited {out.returncode} in its warm-up run ({' '.join(c.cmd)}): {said}")
    if require_output and not out.stdout.strip():
        print(out.stderr[-4000:], file=sys.stderr)
        fail(f"{c.name} printed nothing in its warm-up run (exit {out.returncode}; {' '.join(c.cmd)}): {said}")
    c.expected = (out.returncode, sorted(out.stdout.splitlines()))
    return out


def time_once(c: Contender, scratch: Path) -> float:
    """Wall time of one whole process, its output to a file (not a pipe) and checked afterwards
    against its warm-up's (`Contender.expected`); a failed run fails the bench."""
    fresh = _fresh(scratch) if c.fresh_dir else None
    argv = c.argv(fresh)
    env = c.environ(scratch)
    with tempfile.TemporaryFile() as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, env=env, cwd=c.cwd, stdout=out, stderr=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)
        elapsed = time.perf_counter() - t0
        proc.returncode = rc = os.waitstatus_to_exitcode(status)
        c.cpu.append(usage.ru_utime + usage.ru_stime)
        out.seek(0)
        printed = out.read().decode("utf-8", "replace")
    if rc not in c.ok_codes:
        fail(f"{c.name} exited {rc} in a timed run: {' '.join(argv)}")
    if c.expected is not None:
        code, lines = c.expected
        if rc != code:
            fail(f"{c.name} exited {rc} in a timed run, {code} in its warm-up: {' '.join(argv)}")
        if sorted(printed.splitlines()) != lines:
            fail(f"{c.name} printed {len(printed.splitlines())} lines in a timed run, not the {len(lines)} "
                 f"of its warm-up: {' '.join(argv)}")
    return elapsed


def measure(contenders: Sequence[Contender], runs: int, scratch: Path, progress: bool = True) -> None:
    """Round-robin: run i of every contender before run i+1 of any, so drift in machine load
    (other jobs on a 2-core box) hits all contenders alike."""
    for i in range(runs):
        for c in contenders:
            c.times.append(time_once(c, scratch))
        if progress:
            print(f"\r  run {i + 1}/{runs}", end="", file=sys.stderr, flush=True)
    if progress:
        print(file=sys.stderr)


def fmt_s(seconds: float) -> str:
    return f"{seconds * 1000:8.1f} ms"


def print_table(contenders: Sequence[Contender], baseline: Contender, baseline_label: str) -> None:
    """Wall time (best, median, the ratio of medians) and the median CPU time (user + system, the
    process and what it waited for): on a machine other jobs load, CPU time moves less."""
    width = max(len(c.name) for c in contenders)
    print(f"  {'contender':<{width}}  {'best':>11}  {'median':>11}  {'median / ' + baseline_label:>16}"
          f"  {'median CPU':>11}")
    for c in contenders:
        ratio = c.median / baseline.median
        cpu = fmt_s(statistics.median(c.cpu)) if c.cpu else f"{'-':>11}"
        print(f"  {c.name:<{width}}  {fmt_s(c.best)}  {fmt_s(c.median)}  {ratio:15.2f}x  {cpu}")


def venv_unchanged(before: dict, venv: Path) -> bool:
    """Say whether a contender wrote into the bench venv (a benchmark must never modify it)."""
    changes = snapshot_changes(before, snapshot(venv))
    if changes:
        print("bench venv CHANGED by a contender: " + "; ".join(changes[:20]))
        return False
    print(f"bench venv unchanged: {len(before)} files, same size, mtime and sha256 before and after")
    return True


def start(name: str, doc: str | None, add_args: Callable[[argparse.ArgumentParser], None] | None = None
          ) -> argparse.Namespace:
    """The options every bench takes (--runs), its own ones, and the header line it prints first."""
    parser = argparse.ArgumentParser(description=(doc or "").split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="timed runs per contender (default 10)")
    if add_args is not None:
        add_args(parser)
    args = parser.parse_args()
    if args.runs < 1:
        die("--runs must be at least 1")
    print(f"# {name}: {machine_line()}")
    print(f"# vllm-shim-patch at {git_rev()}")
    return args


def machine_line() -> str:
    try:
        load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        load = "?"
    now = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    return (f"{now}; {platform.node() or 'host'}: {os.cpu_count()} cores, load average {load}; "
            f"Python {platform.python_version()} ({sys.executable})")


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(REPO), *args], stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL, text=True, check=False).stdout.strip()


def git_rev() -> str:
    """The commit measured, and whether the tool's sources differ from it (read-only git)."""
    try:
        rev = _git("rev-parse", "--short", "HEAD")
        dirty = _git("status", "--porcelain", "--", "src", "rules", "codemods")
        if not rev:
            return "?"
        return rev + (" (src/rules/codemods modified in the work tree)" if dirty else "")
    except OSError:
        return "?"


# --------------------------------------------------------------------------- unified diffs

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def _package_relpath(path: str, package: str) -> str:
    """`a/speculators/x.py`, `/abs/site-packages/speculators/x.py` → `speculators/x.py`."""
    parts = Path(path.split("\t")[0].strip()).parts
    if package in parts:
        return "/".join(parts[parts.index(package):])
    return "/".join(parts)


def parse_unified_diff(text: str, package: str) -> dict[str, list[tuple[int, list[str]]]]:
    """file → [(old_start, body lines)], tolerant of tool decorations (rule names after `@@`,
    one file header per hunk as Bowler prints, progress lines between files)."""
    files: dict[str, list[tuple[int, list[str]]]] = {}
    lines = text.splitlines()
    current: list[tuple[int, list[str]]] | None = None
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            current = files.setdefault(_package_relpath(lines[i + 1][4:], package), [])
            i += 2
            continue
        m = _HUNK.match(line)
        if m and current is not None:
            old_left = int(m[2]) if m[2] is not None else 1
            new_left = int(m[4]) if m[4] is not None else 1
            body: list[str] = []
            i += 1
            while i < len(lines) and (old_left > 0 or new_left > 0):
                b = lines[i]
                i += 1
                if b.startswith("\\"):
                    continue
                tag = b[:1] or " "
                body.append(tag + b[1:])
                if tag in " -":
                    old_left -= 1
                if tag in " +":
                    new_left -= 1
            current.append((int(m[1]), body))
            continue
        i += 1
    return files


def apply_unified_diff(original: str, hunks: list[tuple[int, list[str]]]) -> str:
    """Apply hunks (line numbers of the original) to original; raise ValueError on a mismatch."""
    old = original.splitlines()
    out: list[str] = []
    pos = 0  # index into old
    for start, body in sorted(hunks, key=lambda h: h[0]):
        first = max(start - 1, 0) if any(line[0] in " -" for line in body) else start
        if first < pos:
            raise ValueError(f"overlapping hunk at line {start}")
        out.extend(old[pos:first])
        pos = first
        for line in body:
            tag, content = line[0], line[1:]
            if tag in " -":
                if pos >= len(old) or old[pos] != content:
                    raise ValueError(f"context mismatch at line {pos + 1}: {content!r}")
                if tag == " ":
                    out.append(content)
                pos += 1
            else:
                out.append(content)
    out.extend(old[pos:])
    return "\n".join(out) + ("\n" if original.endswith("\n") else "")


def patched_files(diff_text: str, site: Path, package: str) -> dict[str, str]:
    """What a diff would make of the installed files: relpath → new text."""
    result = {}
    for rel, hunks in parse_unified_diff(diff_text, package).items():
        original = (site / rel).read_text(encoding="utf-8")
        result[rel] = apply_unified_diff(original, hunks)
    return result


def importtime_modules(stderr: str) -> list[str]:
    """Module names from `python -X importtime` output."""
    mods = []
    for line in stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            if name != "imported package":
                mods.append(name)
    return mods


def importtime_top(stderr: str, n: int = 5) -> list[tuple[int, str]]:
    """The n largest cumulative import times (µs) among imports made directly by the program."""
    rows = []
    for line in stderr.splitlines():
        if not line.startswith("import time:") or line.count("|") != 2:
            continue
        _self, cumulative, name = line.split(":", 1)[1].split("|")
        if not cumulative.strip().isdigit():
            continue  # the header line
        if len(name) - len(name.lstrip(" ")) == 1:  # "| name": top level; nested ones are indented
            rows.append((int(cumulative), name.strip()))
    return sorted(rows, reverse=True)[:n]

#!/usr/bin/env python3
"""Build (or reuse) the cached test virtualenv of one vLLM release (default: realdata.REFERENCE_VLLM).

Usage:
    python tests/e2e/build_env.py [--vllm X] [--print-path] [--rebuild | --cached-only] [--python PYTHON]
    python tests/e2e/build_env.py --vllm X --freeze [--require SPEC ...] [--override SPEC ...]

The venv lives outside any repository, at

    ${VSP_TEST_CACHE:-~/.cache/vllm-shim-patch}/venvs/vllm-X-<sha12>/

where <sha12> is the first 12 hex digits of the sha256 of
constraints-vllm-X.txt (next to this script). It holds vllm==X with its full
dependency closure (the CUDA build of torch from PyPI: ~11 GB; it only has to
import on a CPU machine) plus speculators==0.3.0 installed --no-deps.

The constraints file says how it is installed. One with a `# vsp-installer: uv`
line (every committed file) is installed with uv (from the test extras) into a
venv without pip, hardlinked from one shared uv cache (${VSP_TEST_CACHE}/uv), so
each further release costs little more disk than its own packages, and a cold
build takes less time than pip's; its `# vsp-requirements:` line names what is
installed with vllm. One without it is installed with pip, with vllm and
EXTRA_PACKAGES (the reference's pins were frozen that way, and are installed
with uv now).

--freeze makes the constraints file of a new release from a real resolve:
it installs vllm==X, the requirements and every --require (e.g. 'cuda-python>=13')
with uv and no constraints, writes `uv pip freeze` of the result as
constraints-vllm-X.txt, and keeps the venv as that file's cached venv.

--override SPEC replaces a pin of vLLM's own requirements that the package index cannot
answer (vLLM 0.34.0 requires flashinfer-python==0.7.3, which the index never had; 0.7.2.post1
and 0.7.4 are there). The constraints file records it on its `# vsp-overrides:` line, so the
venv is rebuilt from the repository alone; uv installs with it as an override file.

A release without a committed constraints file still builds: `--vllm X` resolves it
afresh as --freeze does (--require allowed), but writes the pins into the cache, as
${VSP_TEST_CACHE}/venvs/constraints-vllm-X.txt beside the venv, never into the
repository, and says so on stderr. Later runs build and reuse the venv from those
pins, like a committed file's (byte for byte what --freeze would write, so committing
them keeps the venv); a run with a --require the cached pins were not resolved with
resolves again. A committed file always wins over cached pins.

A venv is reused when its marker file holds the sha256 of the constraints file.
Otherwise it is built in a temporary sibling directory, checked with an import
test and against the constraints, and only then renamed into place, so a killed
build never leaves a venv that looks complete. Builds of the same venv are
serialised with a lock file. Every module of a venv is then compiled to bytecode
once (uv installs none, and the tests' target processes write none), so an
import of vLLM reads it instead of compiling vLLM, torch and transformers again.

The last line on stdout is the venv's python path; all progress and pip output
goes to stderr. --print-path keeps stdout to that one line (no summary).
Exit status is non-zero, with a message on stderr, on any failure; 3 with --cached-only
when the venv is not built (the tests of other releases skip then).

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
from collections.abc import Callable
from pathlib import Path

# The releases are named once, in tests/realdata.py (standard library only, like this script).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from realdata import OLD_SPECULATORS, REFERENCE_VLLM  # noqa: E402

SPECULATORS_VERSION = OLD_SPECULATORS
REQUIRED_PYTHON = (3, 11)
# Installed together with vllm by a constraints file that names no requirements: what
# `import speculators.data_generation.vllm_hidden_states_generator` needs beyond vllm's own
# closure (loguru), and setuptools, which torch.utils.cpp_extension imports (Python 3.11 venvs
# ship it, but name it so the pin applies whichever way the venv was seeded).
EXTRA_PACKAGES = ["loguru", "setuptools"]
# What --freeze installs with vllm by default: the above, and the rest of what speculators'
# modules import beyond vLLM's closure (its config settings and its CLI), so the whole package
# can import where the release lets it.
FREEZE_PACKAGES = ["loguru", "setuptools", "pydantic-settings", "typer-slim"]
VLLM_IMPORT_CHECK = (
    "import vllm.v1.request, vllm.v1.core.sched.scheduler, "
    "vllm.v1.core.kv_cache_utils, vllm.config"
)
SPECULATORS_IMPORT = "import speculators.data_generation.vllm_hidden_states_generator"
MARKER = ".vsp-constraints-sha256"
BYTECODE_MARKER = ".vsp-bytecode"
# Run by the venv's own interpreter: its cache tag and what it can compile are its decision. A
# file that does not compile (a template, another Python's syntax) is left to compile (and fail)
# at import, as pip leaves it.
COMPILE_ALL = (
    "import compileall, sys, sysconfig\n"
    "for d in sorted({sysconfig.get_path('purelib'), sysconfig.get_path('platlib')}):\n"
    "    compileall.compile_dir(d, quiet=2, workers=0)\n"
    "print(sys.implementation.cache_tag)\n"
)
MIN_FREE_BYTES = 14 * 1024**3  # venv ~11 GB + pip's unpack/temp space (uv: most is hardlinked)

HERE = Path(__file__).resolve().parent
PYTHON_CANDIDATES = [
    "python3.11",
    "/root/.pyenv/versions/3.11.7/bin/python",
    "/usr/local/bin/python3.11",
    "/usr/bin/python3.11",
]


_LOCK_FDS: tuple[int, ...] = ()


def constraints_path(vllm: str) -> Path:
    return HERE / f"constraints-vllm-{vllm}.txt"


def cached_constraints_path(vllm: str) -> Path:
    """Where the pins of a release without a committed constraints file are kept: the cache."""
    return cache_root() / "venvs" / f"constraints-vllm-{vllm}.txt"


def freeze_requirements(vllm: str, requires: list[str]) -> list[str]:
    return [f"vllm=={vllm}", *FREEZE_PACKAGES, *requires]


def header_value(text: str, key: str) -> str | None:
    """The value of a `# vsp-KEY: value` line of a constraints file, or None."""
    m = re.search(rf"^# vsp-{key}:[ \t]*(.*)$", text, re.MULTILINE)
    return m.group(1).strip() if m else None


class BuildError(Exception):
    pass


class NotCached(BuildError):
    """--cached-only and the venv is not built (exit 3)."""


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


def parse_pins(text: str, source: Path) -> dict[str, str]:
    pins = {}
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", line)
        if not m:
            raise BuildError(f"{source.name}: not a 'name==version' pin: {raw!r}")
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


def run(cmd: list[str], what: str, capture: bool = False,
        extra_env: dict[str, str] | None = None) -> str:
    log(f"{what}: {' '.join(cmd)}")
    t0 = time.monotonic()
    # pip's output goes to our stderr so stdout stays clean for the path.
    # Children inherit the lock fd: if this script is SIGKILLed, an orphaned pip
    # keeps holding the lock, so the next build waits for it instead of deleting
    # the directory it is still writing to.
    proc = subprocess.run(
        cmd, env={**child_env(), **(extra_env or {})}, text=True, pass_fds=_LOCK_FDS,
        stdout=subprocess.PIPE if capture else sys.stderr,
        stderr=subprocess.STDOUT if capture else sys.stderr,
    )
    if proc.returncode != 0:
        detail = f"\n{proc.stdout}" if capture and proc.stdout else ""
        raise BuildError(f"{what} failed (exit {proc.returncode}){detail}")
    log(f"{what}: done in {time.monotonic() - t0:.1f}s")
    return proc.stdout if capture else ""


def uv_exe() -> str:
    """uv from the test extras (next to this interpreter), else on PATH."""
    here = Path(sys.executable).parent / "uv"
    found = str(here) if here.is_file() else shutil.which("uv")
    if not found:
        raise BuildError("uv not found: install the test extras (pip install -e '.[test]')")
    return found


def uv_env() -> dict[str, str]:
    # One cache for every release, on the venvs' filesystem: hardlinks need the same one.
    env = {"UV_CACHE_DIR": str(cache_root() / "uv"), "UV_LINK_MODE": "hardlink",
           "UV_NO_CONFIG": "1", "UV_PYTHON_DOWNLOADS": "never"}
    return env


def relocate_scripts(venv: Path, old: Path, new: Path) -> None:
    """Rewrite absolute paths in bin/ (shebangs, activate scripts) old -> new.

    Each file is replaced, not written in place: a hardlinked file is shared with uv's cache.
    """
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
        fresh = entry.with_name(entry.name + ".vsp-new")
        fresh.write_bytes(data.replace(old_b, new_b))
        os.chmod(fresh, mode)
        fresh.replace(entry)


def freeze(py: Path, installer: str) -> dict[str, str]:
    """What is installed in the venv of `py`, pip excluded: {normalized name: version}."""
    if installer == "uv":
        # -q: without it uv names the environment on the captured output.
        out = run([uv_exe(), "pip", "freeze", "-q", "--python", str(py)], "uv pip freeze",
                  capture=True, extra_env=uv_env())
    else:
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
            # Not a package line: --freeze would write it into the constraints file.
            raise BuildError(f"{installer} freeze printed a line that is no pin: {line!r}")
        if normalize(name) != "pip":
            installed[normalize(name)] = ver.strip()
    return installed


def check_freeze(py: Path, pins: dict[str, str], installer: str, source: Path) -> None:
    installed = freeze(py, installer)
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
            f"the venv does not match {source.name} (it is the cache key, "
            "so it must list exactly what gets installed):\n" + "\n".join(problems)
        )


def is_complete(venv: Path, digest: str) -> bool:
    marker = venv / MARKER
    try:
        return marker.read_text().strip() == digest and (venv / "bin" / "python").exists()
    except OSError:
        return False


class Recipe:
    """How one release's venv is made, as its constraints file says."""

    def __init__(self, vllm: str, constraints: Path | None, requirements: list[str],
                 installer: str, overrides: list[str] | None = None) -> None:
        self.vllm, self.constraints = vllm, constraints
        self.requirements, self.installer = requirements, installer
        self.overrides = overrides or []

    @classmethod
    def from_file(cls, vllm: str, path: Path, text: str) -> Recipe:
        installer = header_value(text, "installer") or "pip"
        if installer not in ("pip", "uv"):
            raise BuildError(f"{path.name}: unknown vsp-installer {installer!r} (pip or uv)")
        named = header_value(text, "requirements")
        requirements = named.split() if named else [f"vllm=={vllm}", *EXTRA_PACKAGES]
        overrides = (header_value(text, "overrides") or "").split()
        if overrides and installer != "uv":
            raise BuildError(f"{path.name}: vsp-overrides needs vsp-installer uv")
        return cls(vllm, path, requirements, installer, overrides)


def install(recipe: Recipe, py: Path) -> None:
    with_constraints = ["-c", str(recipe.constraints)] if recipe.constraints else []
    if recipe.installer == "uv":
        cmd = [uv_exe(), "pip", "install", "--python", str(py), "--only-binary", ":all:",
               *with_constraints]
        if recipe.overrides:
            # Beside the venv being built (removed with it on failure, moved with it after).
            overrides = py.parent.parent / ".vsp-overrides.txt"
            overrides.write_text("".join(f"{o}\n" for o in recipe.overrides))
            cmd += ["--override", str(overrides)]
        env = uv_env()
    else:
        cmd = [str(py), "-m", "pip", "install", "--no-input", "--only-binary=:all:",
               *with_constraints]
        env = {}
    run(cmd + recipe.requirements, "install vllm", extra_env=env)
    run(cmd + ["--no-deps", f"speculators=={SPECULATORS_VERSION}"], "install speculators",
        extra_env=env)


def import_check(py: Path, recipe: Recipe) -> None:
    run([str(py), "-c", VLLM_IMPORT_CHECK], "import check", capture=True)
    # speculators itself may not import on a release (vLLM 0.24+ pulls transformers 5): that is
    # what the tool reports on that release, not a broken venv. The reference must import it.
    proc = subprocess.run([str(py), "-c", SPECULATORS_IMPORT], env=child_env(),
                          capture_output=True, text=True)
    if proc.returncode == 0:
        log("speculators import check: ok")
    elif recipe.vllm == REFERENCE_VLLM:
        raise BuildError(f"speculators import check failed\n{proc.stderr[-3000:]}")
    else:
        lines = proc.stderr.strip().splitlines() or ["(no output)"]
        # The exception's own line (pydantic adds a "further information" line after it).
        last = next((ln for ln in reversed(lines) if re.match(r"\w[\w.]*(Error|Exception)\b", ln)),
                    lines[-1])
        log(f"speculators {SPECULATORS_VERSION} does not import on vLLM {recipe.vllm}: {last}")


def make_venv(base_python: str, tmp: Path, final_name: str, installer: str) -> Path:
    # The uv venvs have no pip: uv installs and freezes them; nothing else installs into them.
    run([base_python, "-m", "venv", "--prompt", final_name,
         *(["--without-pip"] if installer == "uv" else []), str(tmp)], "create venv")
    return tmp / "bin" / "python"


def build(base_python: str, tmp: Path, final_name: str, recipe: Recipe,
          pins: dict[str, str]) -> None:
    py = make_venv(base_python, tmp, final_name, recipe.installer)
    install(recipe, py)
    check_freeze(py, pins, recipe.installer, recipe.constraints or Path("?"))
    import_check(py, recipe)


def ensure_venv(vllm: str, base_python_arg: str | None, rebuild: bool,
                cached_only: bool = False, requires: list[str] | None = None) -> tuple[Path, str]:
    constraints = constraints_path(vllm)
    if constraints.is_file():
        if requires:
            raise BuildError(f"--require is for --freeze or a release without committed constraints "
                             f"({constraints.name} pins the rest)")
    else:
        constraints = cached_constraints_path(vllm)
        if not usable_cached_pins(constraints, freeze_requirements(vllm, requires or [])):
            if cached_only:
                raise NotCached(f"vLLM {vllm} has no committed constraints and its venv is not built "
                                f"(build it with: python tests/e2e/build_env.py --vllm {vllm})")
            resolved = resolve_uncommitted(vllm, base_python_arg, requires or [])
            if resolved:
                return resolved, "resolved"
        log(f"no committed constraints-vllm-{vllm}.txt: using the pins frozen before to {constraints}")
    data = constraints.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    text = data.decode()
    pins = parse_pins(text, constraints)
    recipe = Recipe.from_file(vllm, constraints, text)
    venvs = cache_root() / "venvs"
    name = f"vllm-{vllm}-{digest[:12]}"
    final = venvs / name

    if not rebuild and is_complete(final, digest):
        return final, "reused"
    if cached_only:
        raise NotCached(f"the venv of vLLM {vllm} is not built: {final} "
                        f"(build it with: python tests/e2e/build_env.py --vllm {vllm})")

    with locked(venvs, name):
        # Re-check under the lock: a concurrent build may have just finished.
        if not rebuild and is_complete(final, digest):
            return final, "reused"
        base_python = preflight(venvs, name, base_python_arg)
        log(f"building {final} with {base_python} using {recipe.installer} "
            "(takes minutes; ~11 GB, downloads ~4.5 GB unless cached)")
        t0 = time.monotonic()
        tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{name}-", dir=venvs))
        try:
            build(base_python, tmp, name, recipe, pins)
            settle(tmp, final, digest, venvs, name)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        post_move_check(final)
        log(f"built {final} in {time.monotonic() - t0:.0f}s")
        return final, "built"


def usable_cached_pins(path: Path, requirements: list[str]) -> bool:
    """Whether the cached pins at `path` answer a resolve of `requirements`.

    Pins resolved with a --require still answer a run without one (the run that needed it
    named it once); a --require they were not resolved with asks for a new resolve.
    """
    try:
        text = path.read_text()
    except OSError:
        return False
    named = (header_value(text, "requirements") or "").split()
    extra = requirements[1 + len(FREEZE_PACKAGES):]
    return named[:1 + len(FREEZE_PACKAGES)] == requirements[:1 + len(FREEZE_PACKAGES)] and (
        not extra or named == requirements)


def freeze_release(vllm: str, base_python_arg: str | None, requires: list[str],
                   overrides: list[str] | None = None) -> tuple[Path, str]:
    """Resolve vllm==X afresh with uv, write its constraints file, keep the venv as its cache."""
    constraints = constraints_path(vllm)
    done = resolve(vllm, base_python_arg, requires, constraints, "freeze again",
                   overrides=overrides or [])
    assert done  # --freeze always resolves
    final, count, seconds = done
    log(f"wrote {constraints} ({count} pins); venv {final} in {seconds:.0f}s")
    return final, "frozen"


def resolve_uncommitted(vllm: str, base_python_arg: str | None, requires: list[str]) -> Path | None:
    """Resolve a release without committed constraints afresh, its pins kept in the cache; None
    when a concurrent run froze usable pins while this one waited for the lock."""
    pins = cached_constraints_path(vllm)
    done = resolve(vllm, base_python_arg, requires, pins, "run again",
                   unless=lambda: usable_cached_pins(pins, freeze_requirements(vllm, requires)))
    if not done:
        return None
    final, count, seconds = done
    # One line, so a test log says why this release's venv is not the repository's.
    log(f"no committed constraints-vllm-{vllm}.txt: resolved vLLM {vllm} afresh with uv and froze "
        f"its {count} pins to {pins} (copy it to tests/e2e/ to commit them); venv {final} "
        f"in {seconds:.0f}s")
    return final


def resolve(vllm: str, base_python_arg: str | None, requires: list[str], dest: Path, again: str,
            unless: Callable[[], bool] = lambda: False,
            overrides: list[str] | None = None) -> tuple[Path, int, float] | None:
    """Install vllm==X with uv and no constraints, write `uv pip freeze` of it to `dest` as a
    constraints file, keep the venv as that file's cached venv: (venv, pins, seconds); None,
    nothing done, when `unless()` holds once the lock is taken."""
    requirements = freeze_requirements(vllm, requires)
    recipe = Recipe(vllm, None, requirements, "uv", overrides)
    venvs = cache_root() / "venvs"
    name = f"vllm-{vllm}-freeze"
    with locked(venvs, name):
        if unless():
            return None
        base_python = preflight(venvs, name, base_python_arg)
        log(f"resolving vllm=={vllm} afresh with uv (no constraints): {' '.join(requirements)}")
        t0 = time.monotonic()
        tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{name}-", dir=venvs))
        try:
            py = make_venv(base_python, tmp, name, "uv")
            install(recipe, py)
            installed = freeze(py, "uv")
            check_cuda_pair(installed, again)
            text = constraints_text(vllm, requirements, installed, base_python, recipe.overrides)
            digest = hashlib.sha256(text.encode()).hexdigest()
            final = venvs / f"vllm-{vllm}-{digest[:12]}"
            import_check(py, recipe)
            # The pins before the venv: killed between the two, the next run builds from them.
            write_atomically(dest, text)
            # The venv is what the file lists, so it is that file's cached venv.
            settle(tmp, final, digest, venvs, name)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    post_move_check(final)
    return final, len(installed), time.monotonic() - t0


def write_atomically(path: Path, text: str) -> None:
    fresh = path.with_name(f".{path.name}.vsp-new")
    fresh.write_text(text)
    fresh.replace(path)


def check_cuda_pair(installed: dict[str, str], again: str = "freeze again") -> None:
    """Refuse a cuda-python of another major than cuda-bindings: its files overwrite the bindings.

    Left free on vLLM 0.33.0, uv paired cuda-bindings 13.5.0 with cuda-python 12.6.2.post1.
    """
    bindings, meta = installed.get("cuda-bindings"), installed.get("cuda-python")
    if bindings and meta and bindings.split(".")[0] != meta.split(".")[0]:
        major = bindings.split(".")[0]
        raise BuildError(f"the resolve paired cuda-bindings {bindings} with cuda-python {meta}, "
                         f"whose files overwrite the bindings; {again} with "
                         f"--require 'cuda-python>={major}'")


def constraints_text(vllm: str, requirements: list[str], installed: dict[str, str],
                     base_python: str, overrides: list[str] | None = None) -> str:
    ver = python_version(base_python) or REQUIRED_PYTHON
    head = [
        f"# Constraints for the vLLM {vllm} end-to-end test venv (the cache key: any edit here,",
        "# comments included, makes build_env.py build a new venv).",
        "#",
        f"# Frozen from a real resolve on CPython {ver[0]}.{ver[1]} / Linux x86_64 by",
        f"#   python tests/e2e/build_env.py --vllm {vllm} --freeze"
        + "".join(f" --require '{r}'" for r in requirements[1 + len(FREEZE_PACKAGES):])
        + "".join(f" --override '{o}'" for o in overrides or []),
        "# i.e. `uv pip install` of the requirements below with no constraints, speculators",
        f"# {SPECULATORS_VERSION} --no-deps, then `uv pip freeze`, sorted. build_env.py installs",
        "# exactly these pins and fails if the venv holds anything else.",
        "# vsp-installer: uv",
        f"# vsp-requirements: {' '.join(requirements)}",
        *([f"# vsp-overrides: {' '.join(overrides)}"] if overrides else []),
    ]
    pins = [f"{n}=={v}" for n, v in sorted(installed.items())]
    return "\n".join(head + pins) + "\n"


class locked:
    """The build lock of one venv name; children inherit its fd (see run)."""

    def __init__(self, venvs: Path, name: str) -> None:
        venvs.mkdir(parents=True, exist_ok=True)
        self.path = venvs / f".{name}.lock"
        self.name = name

    def __enter__(self) -> None:
        global _LOCK_FDS
        self.file = open(self.path, "w")
        try:
            fcntl.flock(self.file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"another build of {self.name} is running; waiting for its lock ({self.path})")
            fcntl.flock(self.file, fcntl.LOCK_EX)
        _LOCK_FDS = (self.file.fileno(),)

    def __exit__(self, *exc: object) -> None:
        global _LOCK_FDS
        _LOCK_FDS = ()
        self.file.close()


def preflight(venvs: Path, name: str, base_python_arg: str | None) -> str:
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
    return base_python


def settle(tmp: Path, final: Path, digest: str, venvs: Path, name: str) -> None:
    """Move the checked venv in `tmp` into place as `final`, its marker last before the rename."""
    relocate_scripts(tmp, tmp, final)
    (tmp / MARKER).write_text(digest + "\n")
    os.chmod(tmp, 0o755)  # mkdtemp made it 0700
    if final.exists() or final.is_symlink():
        trash = Path(tempfile.mkdtemp(prefix=f".tmp-{name}-old-", dir=venvs))
        final.rename(trash / "venv")
        shutil.rmtree(trash, ignore_errors=True)
    tmp.rename(final)


def post_move_check(final: Path) -> None:
    # The venv was moved: check it still runs from its final place.
    out = run([str(final / "bin" / "python"), "-c", "import sys; print(sys.prefix)"],
              "post-move check", capture=True)
    if Path(out.strip()) != final:
        raise BuildError(f"the moved venv runs as {out.strip()!r}, not {str(final)!r}")
    if (final / "bin" / "pip").exists():
        run([str(final / "bin" / "pip"), "--version"], "post-move pip check", capture=True)


def ensure_bytecode(venv: Path) -> None:
    """Compile every module of the venv once, as pip's installs do and uv's do not.

    Each test imports vLLM afresh in a process that writes no bytecode (the tool's target
    session turns it off; PYTHONDONTWRITEBYTECODE may too): without it, every such process
    compiles the vLLM, torch and transformers it imports from source again (on vLLM 0.16 about
    9 of the 16 CPU seconds its import takes). A venv built before this step gets it on its
    next use; the marker says it is done.
    """
    marker = venv / BYTECODE_MARKER
    if marker.is_file():
        return
    with locked(venv.parent, f"{venv.name}-bytecode"):
        if marker.is_file():
            return
        # Beside each source, where every interpreter of the venv looks.
        no_prefix = {k: v for k, v in child_env().items()
                     if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")}
        t0 = time.monotonic()
        proc = subprocess.run([str(venv / "bin" / "python"), "-c", COMPILE_ALL], env=no_prefix,
                              capture_output=True, text=True, pass_fds=_LOCK_FDS)
        if proc.returncode != 0:
            raise BuildError(f"compiling the bytecode of {venv} failed (exit {proc.returncode})\n"
                             f"{proc.stderr[-3000:]}")
        write_atomically(marker, proc.stdout.strip() + "\n")
        log(f"compiled the bytecode of {venv} in {time.monotonic() - t0:.0f}s")


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--print-path", action="store_true",
                    help="print only the venv's python path on stdout")
    ap.add_argument("--rebuild", action="store_true",
                    help="build a fresh venv even if a complete one exists")
    ap.add_argument("--vllm", metavar="X", default=REFERENCE_VLLM,
                    help=f"the vLLM release (default: the reference, {REFERENCE_VLLM}); "
                         "without a committed constraints-vllm-X.txt it is resolved afresh")
    ap.add_argument("--cached-only", action="store_true",
                    help="never build: exit 3 unless the venv is built and current")
    ap.add_argument("--freeze", action="store_true",
                    help="resolve the release afresh with uv and write its constraints file")
    ap.add_argument("--require", action="append", default=[], metavar="SPEC",
                    help="(with --freeze, or a release without committed constraints) one more "
                         "requirement, e.g. 'cuda-python>=13'")
    ap.add_argument("--override", action="append", default=[], metavar="SPEC",
                    help="(with --freeze) replace a pin of vLLM's own requirements the index "
                         "cannot answer, e.g. 'flashinfer-python==0.7.4'; recorded in the file")
    ap.add_argument("--python", metavar="PYTHON",
                    help=f"base interpreter (Python {'{}.{}'.format(*REQUIRED_PYTHON)}; "
                         "default: VSP_PYTHON, then python3.11)")
    args = ap.parse_args()
    # Turn SIGTERM/SIGHUP into KeyboardInterrupt so the temp dir gets removed
    # (subprocess.run kills a running pip first). SIGKILL leaves a .tmp-* dir,
    # which the next build removes under the lock; it never looks complete.
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _interrupt)
    if args.override and not args.freeze:
        ap.error("--override is for --freeze: a committed constraints file names its overrides")
    try:
        if args.freeze:
            venv, how = freeze_release(args.vllm, args.python, args.require, args.override)
        else:
            venv, how = ensure_venv(args.vllm, args.python, args.rebuild, args.cached_only,
                                    args.require)
        ensure_bytecode(venv)
    except NotCached as exc:
        print(f"build_env: {exc}", file=sys.stderr)
        return 3
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

"""A scratch copy of the target to patch where the target itself is not patched: a venv of the
target's own interpreter holding the original release (installed by pip, --no-deps), which sees
the target's site-packages after its own (its vLLM, torch and transformers: the rehearsal runs on
them), or nothing else (`see_target=False`: verification against a vLLM source only).

The target is never written: its speculators stays as it is, shadowed in the copy by the copy's
own. Needs `python -m venv` in the target interpreter and pip in the tool's (`pip --python`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from ..errors import TargetError
from . import archive, naming
from .build import Original

_TIMEOUT_S = 300


def _run(command: list[str], what: str, tmp: Path | None = None) -> str:
    """Run `command` in a process group of its own, killed whole when it ends (an interrupt of
    ours included: `pip --python` runs a second pip under the target's interpreter, which would
    go on writing into our temp folder after we removed it). `tmp`: the command's temp folder
    (pip's `pip-*` folders), one of ours that is removed with it."""
    from ..target import run_grouped

    env = dict(os.environ)
    if tmp is not None:
        tmp.mkdir(parents=True, exist_ok=True)
        env["TMPDIR"] = str(tmp)
    try:
        proc = run_grouped(command, stdin=None, timeout=_TIMEOUT_S, cwd=None, env=env)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise TargetError(f"cannot {what}: {exc}; nothing was written") from None
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        raise TargetError(f"cannot {what}: {tail}; nothing was written")
    return proc.stdout


def write_original(files: Mapping[str, bytes], folder: Path) -> tuple[Path, str]:
    """The original wheel as a file in `folder` (from a cache's unpacked copy too), and the
    requirement that installs exactly it (`speculators===0.3.0`)."""
    original = Original.read(files)
    name = naming.wheel_file_name(original.name, original.release, original.tags)
    entries = archive.order([archive.Entry(n, d) for n, d in files.items()], original.dist_info)
    folder.mkdir(parents=True, exist_ok=True)
    archive.write_atomic(folder, name, archive.zip_bytes(entries))
    return folder / name, f"{original.name}==={original.release}"


def pip_install(python: str, wheels: Path, requirement: str, *, force: bool = False) -> None:
    """Install `requirement` from the folder `wheels` alone (no index, no dependencies): pip writes
    RECORD, and no direct_url.json (`pip freeze` says `name==version`, not a file path). `wheels` is
    a temp folder of ours: pip's own temp folders go inside it."""
    command = [sys.executable, "-m", "pip", "--python", python, "install", "--quiet", "--no-deps", "--no-index",
               "--no-cache-dir", "--disable-pip-version-check", "--find-links", str(wheels), requirement]
    if force:
        command.insert(command.index("--no-deps"), "--force-reinstall")
    _run(command, f"install {requirement} with pip into {python}", tmp=wheels / ".tmp")


_PATH_SCRIPT = """
import json, os, sys, sysconfig
std = [os.path.realpath(sysconfig.get_path(k)) for k in ("stdlib", "platstdlib")]
print(json.dumps([p for p in sys.path if p and os.path.isdir(p)
                  and not any(os.path.realpath(p) == s or os.path.realpath(p).startswith(s + os.sep) for s in std)]))
"""


def site_dirs(python: str) -> list[str]:
    """The folders the target interpreter imports packages from (its sys.path less the standard
    library), in its own order: a .pth's folders (a vLLM seen from another venv) included."""
    out = _run([python, "-I", "-c", _PATH_SCRIPT], f"ask {python} for its import path")
    try:
        found = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise TargetError(f"{python} gave no list of its import path; nothing was written") from None
    return list(dict.fromkeys(str(p) for p in found))


def make(target_python: str, folder: Path, files: Mapping[str, bytes], *, see: list[str]) -> str:
    """A venv in `folder` of `target_python`, the original wheel `files` installed in it, the
    folders `see` on its path after its own site-packages. Returns its interpreter."""
    env = folder / "env"
    _run([target_python, "-m", "venv", "--without-pip", str(env)], f"make a scratch venv with {target_python}")
    python = env / "bin" / "python"
    wheel, requirement = write_original(files, folder / "wheels")
    pip_install(str(python), wheel.parent, requirement)
    own = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
               f"ask {python} for its site-packages").strip().splitlines()[-1:]
    if see:
        # A .pth line adds a folder after the venv's own: its speculators is the one imported.
        (Path(own[0]) / "zz-vsp-target.pth").write_text("".join(f"{p}\n" for p in see if p not in own))
    return str(python)

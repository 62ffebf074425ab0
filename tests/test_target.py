"""Issue 11: an interpreter answering in another shape, or a broken dist-info, is one line and exit 2."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from vllm_shim_patch.cli import main
from vllm_shim_patch.errors import TargetError
from vllm_shim_patch.target import probe


def _interpreter(tmp_path: Path, body: str) -> Path:
    exe = tmp_path / "python"
    exe.write_text(f"#!/bin/sh\n{body}\n")
    exe.chmod(0o755)
    return exe


@pytest.mark.parametrize(
    ("answer", "detail"),
    [
        ("[]", "TypeError: expected an object, got list"),
        ('{"python": 1}', "TypeError: expected a string, got int"),
        ('{"python": "/x"}', "KeyError: 'package'"),
        ('{"python": "/x", "package": [], "vllm": null}', "TypeError: 'package' is a list"),
        (('{"python": "/x", "python_version": "3.12.1", "vllm": null, "package": {"name": "speculators", '
         '"version": "0.3.0", "location": "/s", "editable": null, "has_record": true, "files": {}}}'),
         "TypeError: 'files' is a dict"),
        (('{"python": "/x", "python_version": "3.12.1", "vllm": null, "package": {"name": "speculators", '
         '"version": "0.3.0", "location": "/s", "editable": null, "has_record": true, '
         '"files": [{"path": "a.py", "hash": null, "size": "12"}]}}'),
         "TypeError: size of 'a.py' is a str"),
    ],
    ids=["list", "wrong-type", "missing-key", "package-list", "files-dict", "size-str"],
)
def test_probe_answer_of_another_shape(tmp_path: Path, answer: str, detail: str) -> None:
    exe = _interpreter(tmp_path, f"echo '{answer}'")
    with pytest.raises(TargetError) as info:
        probe(str(exe), "speculators")
    assert str(info.value) == (f"interpreter {str(exe)!r} answered the probe with JSON of another shape ({detail}): "
                               f"pass --python with a plain Python interpreter")


def _site_with_dist(tmp_path: Path, metadata: bool) -> Path:
    site = tmp_path / "site"
    dist = site / "speculators-0.3.0.dist-info"
    dist.mkdir(parents=True)
    (site / "speculators").mkdir()
    (site / "speculators" / "__init__.py").write_text("")
    if metadata:
        (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: speculators\nVersion: 0.3.0\n")
    (dist / "RECORD").write_text("speculators/__init__.py,,\nspeculators-0.3.0.dist-info/RECORD,,\n")
    return site


def test_dist_info_without_metadata(tmp_path: Path) -> None:
    site = _site_with_dist(tmp_path, metadata=False)
    exe = _interpreter(tmp_path, f'PYTHONPATH={site} exec {sys.executable} "$@"')
    result = CliRunner().invoke(main, ["--python", str(exe), "--state-dir", str(tmp_path / "state"), "--json",
                                       "status"])
    message = (f"speculators in {site} has a dist-info without METADATA (a broken install): reinstall it with "
               f"pip install --force-reinstall --no-deps speculators")
    assert (result.exit_code, result.stderr) == (2, f"patch-speculators: error: {message}\n")
    assert json.loads(result.stdout) == {"ok": False, "error": message, "kind": "TargetError"}
    assert not (tmp_path / "state").exists()


def test_the_same_dist_info_with_metadata_is_found(tmp_path: Path) -> None:
    site = _site_with_dist(tmp_path, metadata=True)
    exe = _interpreter(tmp_path, f'PYTHONPATH={site} exec {sys.executable} "$@"')
    target = probe(str(exe), "speculators")
    assert (target.package, target.version, target.location) == ("speculators", "0.3.0", site)

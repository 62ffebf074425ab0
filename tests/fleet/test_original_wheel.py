"""The whole original wheel found where `overlay/pristine.py` looks (--wheel, the wheel the
installer recorded, the pip and uv caches), each copy checked against the installed RECORD."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fixture import DIST_INFO, GENERATOR, as_zip, original_files
from test_installed import install

from vllm_shim_patch.errors import TargetError, UsageError
from vllm_shim_patch.overlay.pristine import original_wheel


@pytest.fixture
def caches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    pip, uv = tmp_path / "pip-cache", tmp_path / "uv-cache"
    pip.mkdir()
    uv.mkdir()
    monkeypatch.setenv("PIP_CACHE_DIR", str(pip))
    monkeypatch.setenv("UV_CACHE_DIR", str(uv))
    return pip, uv


def _target(tmp_path: Path):  # type: ignore[no-untyped-def]
    site = tmp_path / "site"
    site.mkdir()
    return install(site, as_zip(original_files()))


def test_wheel_option(tmp_path: Path, caches: tuple[Path, Path]) -> None:
    target = _target(tmp_path)
    good = tmp_path / "speculators-0.4.0-py3-none-any.whl"
    good.write_bytes(as_zip(original_files()))
    found = original_wheel(target, str(good), False, print)
    assert found.source == f"--wheel {good}"
    assert found.files == original_files()
    other = tmp_path / "other.whl"
    other.write_bytes(as_zip({**original_files(), GENERATOR: b"another release\n"}))
    with pytest.raises(UsageError, match=rf"^--wheel {other}: {GENERATOR} in it does not match the installed "
                                         rf"RECORD's sha256; give the speculators 0.4.0 wheel"):
        original_wheel(target, str(other), False, print)
    with pytest.raises(UsageError, match=r"no such file"):
        original_wheel(target, str(tmp_path / "gone.whl"), False, print)


def test_the_installed_from_wheel_then_the_caches(tmp_path: Path, caches: tuple[Path, Path]) -> None:
    pip, uv = caches
    target = _target(tmp_path)
    logged: list[str] = []
    with pytest.raises(TargetError, match=r"^cannot find the wheel speculators 0.4.0 was installed from \(no --wheel, "
                                          r"none in the pip or uv cache, the package index not asked \(--no-index\)\): "
                                          r"pass --wheel PATH"):
        original_wheel(target, None, False, logged.append)
    # uv keeps a wheel unpacked, its dist-info as in the wheel.
    root = uv / "archive-v0" / "abc"
    for name, data in original_files().items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    assert original_wheel(target, None, False, logged.append).source == f"the uv cache ({root})"
    (pip / "wheels" / "x").mkdir(parents=True)
    cached = pip / "wheels" / "x" / "speculators-0.4.0-py3-none-any.whl"
    cached.write_bytes(as_zip(original_files()))
    assert original_wheel(target, None, False, logged.append).source == f"the pip cache ({cached})"
    there = tmp_path / "wheelhouse" / "speculators-0.4.0-py3-none-any.whl"
    there.parent.mkdir()
    there.write_bytes(as_zip(original_files()))
    (target.location / DIST_INFO / "direct_url.json").write_text(json.dumps({"url": there.as_uri(), "archive_info": {}}))
    found = original_wheel(target, None, False, logged.append)
    assert found.source == f"the wheel it was installed from ({there})" and found.files == original_files()
    # A copy of other bytes is passed over, and said.
    there.write_bytes(as_zip({**original_files(), GENERATOR: b"x\n"}))
    assert original_wheel(target, None, False, logged.append).source == f"the pip cache ({cached})"
    assert logged[-1] == (f"not the original speculators 0.4.0 wheel: the wheel it was installed from ({there}): "
                          f"{GENERATOR} in it does not match the installed RECORD's sha256")

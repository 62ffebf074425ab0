"""LiveSignatures: the same fixture tree, imported in a subprocess, and the probe's failures."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from sigcases import RESOLVED, TREE, render

from vllm_shim_patch.errors import SignatureError
from vllm_shim_patch.signatures import LiveSignatures, Signature, StaticSignatures
from vllm_shim_patch.signatures import live as livemod


@pytest.fixture(scope="module")
def static() -> StaticSignatures:
    return StaticSignatures(TREE)


def _importable(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _live_rows() -> list[tuple[str, str]]:
    skip = set()
    if not _importable("pydantic"):
        skip.update(("vllm.pyd.", "vllm.passthru."))
    if not _importable("torch"):
        skip.add("vllm.layers.")
    if not _importable("msgspec"):
        skip.add("vllm.structs.")
    if sys.version_info < (3, 11) and not _importable("typing_extensions"):
        skip.add("vllm.transform.")
    return [(q, e) for q, e in RESOLVED if not any(q.startswith(s) for s in skip)]


def _env(*paths: Path) -> dict[str, str]:
    """This environment with `paths` first on PYTHONPATH (the subprocess sees what pytest sees)."""
    rest = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(p) for p in paths] + rest)}


@pytest.fixture(scope="module")
def live_answers() -> dict[str, Signature | None]:
    live = LiveSignatures(sys.executable, env=_env(TREE))
    return live.get_many([q for q, _ in _live_rows()])


def test_live_agrees_with_static(
    live_answers: dict[str, Signature | None], static: StaticSignatures
) -> None:
    rows = _live_rows()
    assert len(rows) >= len(RESOLVED) - 10
    live = {q: render(live_answers[q]) for q, _ in rows}
    assert live == {q: render(static.get(q)) for q, _ in rows}
    assert all(s.origin == "live" for s in live_answers.values() if s is not None)


def test_live_caches_and_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    real_run = subprocess.run

    def counting_run(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(kwargs["input"])
        return real_run(*args, **kwargs)

    monkeypatch.setattr(livemod.subprocess, "run", counting_run)
    live = LiveSignatures(sys.executable, env=_env(TREE))
    first = live.get_many(["vllm.funcs.plain", "vllm.reexport.hidden", "vllm.funcs.plain"])
    assert list(first) == ["vllm.funcs.plain", "vllm.reexport.hidden"]
    assert render(first["vllm.funcs.plain"]) == "a, b=, *, c, d="
    assert first["vllm.reexport.hidden"] is None
    assert "has no attribute 'hidden'" in (live.unknown_reason("vllm.reexport.hidden") or "")
    assert live.get("vllm.funcs.plain") is first["vllm.funcs.plain"]
    assert live.get("vllm.reexport.hidden") is None
    assert len(calls) == 1


def _fake_vllm(root: Path, init: str, **modules: str) -> Path:
    (root / "vllm").mkdir(parents=True)
    (root / "vllm" / "__init__.py").write_text(init)
    for name, text in modules.items():
        (root / "vllm" / f"{name}.py").write_text(text)
    return root


def test_live_import_failure_names_the_cause(tmp_path: Path) -> None:
    root = _fake_vllm(tmp_path, "import not_a_real_dependency_xyz\n")
    live = LiveSignatures(sys.executable, env=_env(root))
    with pytest.raises(SignatureError) as info:
        live.get("vllm.anything")
    lines = str(info.value).splitlines()
    assert lines[0] == (
        f"vllm fails to import in {sys.executable}: "
        "ModuleNotFoundError: No module named 'not_a_real_dependency_xyz'"
    )
    assert any("Traceback" in line or "vllm/__init__.py" in line for line in lines[1:])


def test_live_per_name_errors_are_unknown(tmp_path: Path) -> None:
    root = _fake_vllm(
        tmp_path,
        "",
        needs_dep="import not_a_real_dependency_xyz\ndef f(a): pass\n",
        ok="VALUE = 3\ndef f(a, /): pass\n",
    )
    live = LiveSignatures(sys.executable, env=_env(root))
    got = live.get_many(["vllm.needs_dep.f", "vllm.ok.VALUE", "vllm.ok.f", "vllm.ok.g"])
    assert got["vllm.needs_dep.f"] is None
    assert "No module named 'not_a_real_dependency_xyz'" in (
        live.unknown_reason("vllm.needs_dep.f") or ""
    )
    assert got["vllm.ok.VALUE"] is None and "not callable" in (
        live.unknown_reason("vllm.ok.VALUE") or ""
    )
    assert got["vllm.ok.g"] is None
    assert render(got["vllm.ok.f"]) == "a, /"


def test_live_output_survives_noise_on_stdout(tmp_path: Path) -> None:
    init = "import os\nprint('INFO vllm is starting')\nos.write(1, b'raw bytes on fd 1\\n')\n"
    root = _fake_vllm(tmp_path, init, m="def f(a, *, b=1): print('called?')\n")
    assert render(LiveSignatures(sys.executable, env=_env(root)).get("vllm.m.f")) == "a, *, b="


def test_live_probe_directory_cannot_shadow_modules(tmp_path: Path) -> None:
    probe_dir = tmp_path / "remote"
    probe_dir.mkdir()
    shutil.copy(livemod.PROBE, probe_dir / "signature_probe.py")
    (probe_dir / "json.py").write_text("raise ImportError('shadowed json')\n")
    (probe_dir / "inspect.py").write_text("raise ImportError('shadowed inspect')\n")
    _fake_vllm(probe_dir, "raise ImportError('shadowed vllm')\n")
    proc = subprocess.run(
        [sys.executable, str(probe_dir / "signature_probe.py")],
        input='["vllm.funcs.star"]',
        capture_output=True,
        check=False,
        text=True,
        env=_env(TREE),
    )
    assert proc.returncode == 0, proc.stderr
    assert '"kind": "var_positional"' in proc.stdout


def test_live_timeout(tmp_path: Path) -> None:
    root = _fake_vllm(tmp_path, "import time\ntime.sleep(30)\n")
    with pytest.raises(SignatureError, match=r"^signature probe timed out after 0.5s in "):
        LiveSignatures(sys.executable, timeout=0.5, env=_env(root)).get("vllm.x")


def test_live_bad_interpreter(tmp_path: Path) -> None:
    with pytest.raises(SignatureError, match=r"^cannot run "):
        LiveSignatures(str(tmp_path / "no-python")).get("vllm.x")


def test_live_probe_crash(tmp_path: Path) -> None:
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho 'boom: no interpreter here' >&2\nexit 3\n")
    fake.chmod(0o755)
    with pytest.raises(SignatureError) as info:
        LiveSignatures(str(fake)).get("vllm.x")
    assert str(info.value).splitlines() == [
        f"signature probe failed in {fake} (exit code 3)",
        "boom: no interpreter here",
    ]

"""What compiles is the target interpreter's call, not the tool's: a real Debian CPython 3.13 as a
target of this (3.11) tool accepts PEP 695 code the tool's own grammar refuses, and a 3.11 target
refuses it. The speculators 0.3.0 wheel is the real one, with a PEP 695 alias added atop the
generator (RECORD rebuilt)."""

from __future__ import annotations

import base64
import hashlib
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import realdata
from conftest import EDITS, GENERATOR, Sandbox

from vllm_shim_patch.errors import TargetError
from vllm_shim_patch.rewrite import grammar
from vllm_shim_patch.rewrite.results import FileResult
from vllm_shim_patch.rewrite.grammar import compile_in_target
from vllm_shim_patch.kinds import FileStatus
from vllm_shim_patch.target import Target

PEP695 = b"type Hidden[T] = list[T]  # PEP 695: Python 3.12 and later\n"


def _target(python: str) -> Target:
    return Target(python, "", "pkg", "1.0", Path("/nonexistent"), (), None, None, None)


def _changed(path: str, after: bytes) -> FileResult:
    return FileResult(path, FileStatus.CHANGED, b"x = 1\n", after)


def test_one_process_judges_every_changed_file(monkeypatch: pytest.MonkeyPatch) -> None:
    started = []
    real = grammar.subprocess.Popen
    monkeypatch.setattr(grammar.subprocess, "Popen", lambda *a, **k: started.append(a) or real(*a, **k))
    unchanged = FileResult("pkg/c.py", FileStatus.UNCHANGED, b"def broken(:\n", b"def broken(:\n")
    results = compile_in_target(_target(sys.executable), [
        _changed("pkg/a.py", b"x = 2\n"), _changed("pkg/b.py", b"def f(:\n    pass\n"), unchanged])
    assert len(started) == 1
    assert [(r.path, r.status, r.after) for r in results] == [
        ("pkg/a.py", FileStatus.CHANGED, b"x = 2\n"),
        ("pkg/b.py", FileStatus.FAILED, b"x = 1\n"),  # a failed file keeps its bytes
        ("pkg/c.py", FileStatus.UNCHANGED, b"def broken(:\n"),  # not the tool's to judge: not rewritten
    ]
    version = ".".join(map(str, sys.version_info[:3]))
    assert results[1].reason == f"result does not compile for the target's Python {version}: invalid syntax (line 1)"


def test_no_changed_file_starts_no_process(monkeypatch: pytest.MonkeyPatch) -> None:
    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("nothing to compile, no process to start")

    monkeypatch.setattr(grammar.subprocess, "Popen", never)
    same = FileResult("pkg/a.py", FileStatus.UNCHANGED, b"x = 1\n", b"x = 1\n")
    assert compile_in_target(_target(sys.executable), [same]) == [same]


def test_an_interpreter_started_ahead_is_stopped_when_nothing_changed() -> None:
    ahead = grammar.TargetGrammar(_target(sys.executable))
    proc = ahead.proc
    assert proc is not None and proc.poll() is None  # waiting for the files
    same = FileResult("pkg/a.py", FileStatus.UNCHANGED, b"x = 1\n", b"x = 1\n")
    assert ahead.check([same]) == [same]
    assert proc.returncode is not None  # stopped and reaped, not left behind
    ahead.close()  # idempotent


def test_a_target_that_cannot_answer_is_one_error_line(tmp_path: Path) -> None:
    broken = tmp_path / "python"
    broken.write_text("#!/bin/sh\necho 'ImportError: no json here' >&2\nexit 3\n")
    broken.chmod(0o755)
    with pytest.raises(TargetError) as err:
        compile_in_target(_target(str(broken)), [_changed("pkg/a.py", b"x = 2\n")])
    assert str(err.value) == (f"interpreter {str(broken)!r} could not check that the rewritten files compile "
                              "(exit 3): ImportError: no json here; nothing written")


# ---------------------------------------------------------------- real interpreters, real wheel


@pytest.fixture(scope="session")
def wheel_pep695(tmp_path_factory: pytest.TempPathFactory, speculators_wheel: Path) -> Path:
    out = tmp_path_factory.mktemp("wheels") / "speculators-0.3.0-py3-none-any.whl"
    record_name = "speculators-0.3.0.dist-info/RECORD"
    files: dict[str, bytes] = {}
    with zipfile.ZipFile(speculators_wheel) as src:
        for name in src.namelist():
            data = src.read(name)
            files[name] = PEP695 + data if name == GENERATOR else data
    lines = []
    for name, data in files.items():
        if name != record_name:
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            lines.append(f"{name},sha256={digest},{len(data)}")
    files[record_name] = ("\n".join([*lines, f"{record_name},,"]) + "\n").encode()
    with zipfile.ZipFile(out, "w") as dst:
        for name, data in files.items():
            dst.writestr(name, data)
    return out


def _sandbox(tmp_path: Path, interpreter: str, wheel: Path) -> Sandbox:
    root = tmp_path / "venv"
    subprocess.run([interpreter, "-m", "venv", "--without-pip", str(root)], check=True)
    subprocess.run([sys.executable, "-m", "pip", "--python", str(root / "bin" / "python"), "install", "--quiet",
                    "--no-deps", str(wheel)], check=True, capture_output=True)
    site = next(root.glob("lib/python3*/site-packages"))
    return Sandbox(root, root / "bin" / "python", site, tmp_path / "state",
                   ("--vllm-source", str(realdata.vllm_source(realdata.REFERENCE_VLLM))))


def _python311() -> str:
    """A real 3.11 interpreter: the tool's own when it is one (as on this project's machines)."""
    if sys.version_info[:2] == (3, 11):
        return sys.executable
    found = shutil.which("python3.11")
    assert found, "this test needs a Python 3.11 interpreter (python3.11 on PATH)"
    return found


@pytest.mark.slow
def test_a_313_target_compiles_pep695_the_tool_cannot(tmp_path: Path, wheel_pep695: Path) -> None:
    if sys.version_info < (3, 12):
        with pytest.raises(SyntaxError):  # the premise: this tool's own grammar refuses the file
            compile(PEP695, "x.py", "exec", dont_inherit=True)
    sb = _sandbox(tmp_path, str(realdata.debian_python("3.13")), wheel_pep695)
    dry = sb.run("--vllm-version", "0.16", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.count("\n@@ ") + dry.stdout.startswith("@@") == 12
    assert "@@ -137,7 +137,6 @@ kv-cache-config-drop-specs" in dry.stdout
    assert dry.stderr.splitlines()[-1] == f"{EDITS} edits in 2 files; vLLM 0.16 (static)"
    r = sb.run("--vllm-version", "0.16")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"patched speculators 0.3.0 for vLLM 0.16: {EDITS} edits in 2 files; vLLM 0.16 (static); ")
    written = (sb.site / GENERATOR).read_bytes()
    assert written.startswith(PEP695)
    assert b"block_size=self.vllm_config.cache_config.block_size," in written
    check = subprocess.run([str(sb.python), "-c", "import sys; compile(open(sys.argv[1], 'rb').read(), 'g', 'exec')",
                            str(sb.site / GENERATOR)], capture_output=True, text=True, check=False)
    assert check.returncode == 0, check.stderr


@pytest.mark.slow
def test_a_311_target_refuses_pep695_and_nothing_is_written(tmp_path: Path, wheel_pep695: Path) -> None:
    sb = _sandbox(tmp_path, _python311(), wheel_pep695)
    version = subprocess.run([str(sb.python), "-c", "import platform; print(platform.python_version())"],
                             capture_output=True, text=True, check=True).stdout.strip()
    before = sb.snapshot()
    reason = f"result does not compile for the target's Python {version}: invalid syntax (line 1)"
    dry = sb.run("--vllm-version", "0.16", "--dry-run")
    assert dry.returncode == 1
    assert f"{GENERATOR}: failed: {reason}" in dry.stderr.splitlines()
    r = sb.run("--vllm-version", "0.16")
    assert r.returncode == 1
    assert r.stdout.strip() == f"nothing written: {GENERATOR}: {reason}"
    assert sb.snapshot() == before


@pytest.mark.parametrize("signum", ["INT", "TERM"])
def test_a_check_that_dies_of_an_interrupt_is_an_interrupt(tmp_path: Path, signum: str) -> None:
    """Ctrl-C reaches the whole foreground group, so the check may die of it before the tool sees
    its own: an interrupt ("interrupted", exit 130, at the CLI), not "could not check ... (exit -2)".
    The target is a stand-in interpreter that kills itself with the signal, as Python does after
    an uncaught KeyboardInterrupt."""
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\nkill -{signum} $$\n")
    python.chmod(0o755)
    with pytest.raises(KeyboardInterrupt):
        compile_in_target(_target(str(python)), [_changed("pkg/a.py", b"x = 2\n")])

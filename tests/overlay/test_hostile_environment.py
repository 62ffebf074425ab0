"""The overlay in a hostile environment: no git, a refused first run, no home folder, the C locale,
a deleted working folder, an overlong state dir name, a state.json that lies."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import Sandbox
from tampering import error, overlay_of
from test_overlay import assert_pristine

# Every test here runs the CLI on a sandbox venv with the real speculators wheel.
pytestmark = pytest.mark.slow

NO_GIT = error("git executable not found: install git (e.g. apt-get install git) and run again")


def _cli(sb: Sandbox, *args: str, env: dict[str, str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    drop = ("XDG_STATE_HOME", "XDG_CACHE_HOME", "VSP_CACHE_DIR", "PYTHONIOENCODING", "LANG", "LC_ALL", "LC_CTYPE")
    full = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("VSP_TEST_")}
    return subprocess.run([sys.executable, "-m", "vllm_shim_patch", "--python", str(sb.python), *args],
                          capture_output=True, text=True, env={**full, **env}, cwd=cwd, timeout=300, check=False)


def test_no_git_on_path_says_git_is_missing(sandbox: Sandbox, tmp_path: Path) -> None:
    assert sandbox.run("--vllm-version", "0.16").returncode == 0
    before = sandbox.snapshot()
    for command in (["rollback"], ["--vllm-version", "0.16", "--check"], ["rollback", "--to", "patched"]):
        r = sandbox.run(*command, env={"PATH": str(tmp_path / "empty-bin")})
        assert (r.returncode, r.stderr) == (2, NO_GIT), command
    assert sandbox.snapshot() == before


def test_a_refused_first_apply_leaves_no_lock_and_no_folder(sandbox: Sandbox, tmp_path: Path) -> None:
    config = sandbox.site / "speculators/config.py"
    config.write_bytes(config.read_bytes() + b"# local fix\n")
    # No pristine copy to be had (empty caches, no index): apply refuses the hand-edited file.
    env = {"PIP_CACHE_DIR": str(tmp_path / "pip"), "UV_CACHE_DIR": str(tmp_path / "uv")}
    r = sandbox.run("--vllm-version", "0.16", "--no-index", env=env)
    assert r.returncode == 2
    assert not sandbox.state.exists()
    sandbox.state.mkdir()
    assert sandbox.run("--vllm-version", "0.16", "--no-index", env=env).returncode == 2
    assert list(sandbox.state.iterdir()) == []


def test_home_that_does_not_exist_is_never_created(sandbox: Sandbox, tmp_path: Path) -> None:
    home = tmp_path / "nonexistent"
    # With a state dir given, the caches under HOME are off: nothing creates the home folder.
    for command in (["--dry-run", "--vllm-version", "0.16"], ["--vllm-version", "0.16"]):
        r = _cli(sandbox, "--state-dir", str(sandbox.state), *command, env={"HOME": str(home)})
        assert r.returncode == 0, r.stderr
        assert not home.exists()
    for command in (["--dry-run", "--vllm-version", "0.16"], ["--vllm-version", "0.16"], ["status"], ["rollback"]):
        r = _cli(sandbox, *command, env={"HOME": str(home)})
        assert (r.returncode, r.stderr) == (2, error(
            f"HOME {home} is not a folder: set HOME or XDG_STATE_HOME, or pass --state-dir")), command
        assert not home.exists()


def test_c_locale_with_a_non_ascii_venv_path(sandbox_template: Path, tmp_path: Path) -> None:
    root = tmp_path / "vénv"
    shutil.copytree(sandbox_template, root, symlinks=True)
    sb = Sandbox(root, root / "bin" / "python", next(root.glob("lib/python3*/site-packages")), tmp_path / "stäte")
    c = {"LC_ALL": "C", "PYTHONUTF8": "0"}
    status = _cli(sb, "--state-dir", str(sb.state), "status", env=c)
    assert (status.returncode, status.stderr) == (0, "")
    assert status.stdout == "not tracked: speculators 0.3.0 was never patched by this tool; files match RECORD\n"
    applied = _cli(sb, "--state-dir", str(sb.state), "--vllm-version", "0.16", env=c)
    assert applied.returncode == 0, applied.stderr
    again = _cli(sb, "--state-dir", str(sb.state), "status", env=c)
    assert again.stdout.startswith("patched (not rehearsed: no vLLM in the target): speculators 0.3.0 for vLLM 0.16"), again.stderr
    # The same folder in a UTF-8 locale: one overlay, not two.
    assert _cli(sb, "--state-dir", str(sb.state), "status", env={}).stdout.startswith("patched (not rehearsed: no vLLM in the target): ")
    back = _cli(sb, "--state-dir", str(sb.state), "rollback", env=c)
    assert back.returncode == 0, back.stderr
    assert_pristine(sb)


def test_relative_state_dir_from_a_deleted_folder(sandbox: Sandbox, tmp_path: Path) -> None:
    gone = tmp_path / "gone"
    gone.mkdir()
    for command in ("status", "--vllm-version 0.16", "rollback"):
        script = (f"cd {gone} && rmdir {gone} && exec {sys.executable} -m vllm_shim_patch --python {sandbox.python} "
                  f"--state-dir rel {command}")
        r = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=300, check=False)
        assert (r.returncode, r.stderr) == (2, error(
            "--state-dir rel: a relative path, but the current folder no longer exists: pass an absolute path or "
            "run from an existing folder")), command
        gone.mkdir()
    assert_pristine(sandbox)


def test_state_dir_name_over_255_bytes(sandbox: Sandbox, tmp_path: Path) -> None:
    root = tmp_path / ("x" * 300) / "state"
    for command in (["status"], ["--vllm-version", "0.16"], ["rollback"]):
        r = sandbox.run("--state-dir", str(root), *command)
        assert (r.returncode, r.stderr) == (2, error(
            f"state dir {root}: the folder name {'x' * 40!r}... is 300 bytes long, more than the 255 a filesystem "
            f"allows: pass --state-dir with a shorter path")), command
    assert_pristine(sandbox)


def test_an_extra_files_entry_in_state_json_is_rebuilt_from_git(sandbox: Sandbox) -> None:
    assert sandbox.run("--vllm-version", "0.16").returncode == 0
    state = overlay_of(sandbox) / "state.json"
    data = json.loads(state.read_text())
    data["files"].append("speculators/extra.py")
    data["head"]["speculators/extra.py"] = "sha256=planted"
    state.write_text(json.dumps(data))
    back = sandbox.run("rollback")
    assert back.returncode == 0, back.stderr
    assert back.stdout == ("rolled back speculators 0.3.0 to original: restored 2 files; sha256 equal to RECORD "
                           "for all 52 files\n")
    assert_pristine(sandbox)
    assert "speculators/extra.py" not in json.loads(state.read_text())["files"]

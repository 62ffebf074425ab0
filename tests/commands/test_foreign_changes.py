"""Changes made by someone else are never overwritten or believed: another release installed under
the overlay, edits after a crash or after apply, the caller's git environment, a busy lock."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import GENERATOR, Sandbox

from vllm_shim_patch.fsutil import record_hash
from vllm_shim_patch.target import run_remote


@pytest.fixture(scope="session")
def wheel_031(tmp_path_factory: pytest.TempPathFactory, speculators_wheel: Path) -> Path:
    """speculators 0.3.0 relabelled 0.3.1, with one more line atop the generator (RECORD rebuilt)."""
    out = tmp_path_factory.mktemp("wheels") / "speculators-0.3.1-py3-none-any.whl"
    files: dict[str, bytes] = {}
    with zipfile.ZipFile(speculators_wheel) as src:
        for name in src.namelist():
            data = src.read(name)
            name = name.replace("speculators-0.3.0.dist-info", "speculators-0.3.1.dist-info")
            if name.endswith("METADATA"):
                data = data.replace(b"Version: 0.3.0", b"Version: 0.3.1", 1)
            if name == GENERATOR:
                data = b"# speculators 0.3.1\n" + data
            files[name] = data
    record_name = "speculators-0.3.1.dist-info/RECORD"
    lines = []
    for name, data in files.items():
        if name == record_name:
            continue
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        lines.append(f"{name},sha256={digest},{len(data)}")
    lines.append(f"{record_name},,")
    files[record_name] = ("\n".join(lines) + "\n").encode()
    with zipfile.ZipFile(out, "w") as dst:
        for name, data in files.items():
            dst.writestr(name, data)
    return out


def pristine(sb: Sandbox) -> bool:
    return all(record_hash((sb.site / p).read_bytes()) == d for p, d in sb.record().items())


@pytest.mark.slow
def test_upgrade_under_the_overlay(sandbox: Sandbox, wheel_031: Path) -> None:
    assert sandbox.run("--vllm-version", "0.16").returncode == 0
    patch_030 = json.loads(sandbox.run("log", "--json").stdout)["commits"][0]["commit"]
    sandbox.pip_reinstall(wheel_031)
    status = sandbox.run("status")
    assert status.stdout.startswith(
        "drifted: speculators 0.3.0 was tracked, 0.3.1 is installed now")
    # The dry run plans from 0.3.1's own bytes (one line further down), not from 0.3.0's original.
    dry = sandbox.run("--vllm-version", "0.16", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "@@ -137,7 +137,6 @@ kv-cache-config-drop-specs" in dry.stdout
    # A state of 0.3.0 cannot be written over 0.3.1.
    back = sandbox.run("rollback", "--to", patch_030)
    assert back.returncode == 2
    assert back.stderr.splitlines()[-1] == (
        f"patch-speculators: error: {patch_030} is a state of speculators 0.3.0, but speculators 0.3.1 is "
        "installed: roll back within the installed version, or reinstall speculators 0.3.0 first"
    )
    # Even with the state cache gone, rollback does not bring 0.3.0's files back.
    next(sandbox.state.glob("speculators-*/state.json")).unlink()
    r = sandbox.run("rollback")
    assert r.returncode == 0, r.stderr
    assert pristine(sandbox)
    assert (sandbox.site / GENERATOR).read_bytes().startswith(b"# speculators 0.3.1\n")


@pytest.mark.slow
def test_recovery_leaves_a_file_changed_after_the_crash(sandbox: Sandbox, tmp_path: Path) -> None:
    trace = tmp_path / "trace.txt"
    assert sandbox.run("--vllm-version", "0.16", env={"VSP_TEST_TRACE": str(trace)}).returncode == 0
    points = [line.split(" ", 1)[1] for line in trace.read_text().splitlines()]
    assert sandbox.run("rollback").returncode == 0
    trace.unlink()
    assert sandbox.run("--vllm-version", "0.17", env={"VSP_TEST_TRACE": str(trace)}).returncode == 0
    later = [line.split(" ", 1)[1] for line in trace.read_text().splitlines()]
    assert sandbox.run("rollback").returncode == 0
    n = later.index("apply:wrote " + GENERATOR) + 1
    killed = sandbox.run("--vllm-version", "0.17", env={"VSP_TEST_KILL_AT": str(n)})
    assert killed.returncode == -9
    generator = sandbox.site / GENERATOR
    generator.write_bytes(generator.read_bytes() + b"# my own fix\n")
    r = sandbox.run("--vllm-version", "0.17")
    assert f"left as found, changed since the interrupted run: {GENERATOR}" in r.stderr
    assert r.returncode == 2  # then: a hand edit on top of the patch is refused, not overwritten
    assert generator.read_bytes().endswith(b"# my own fix\n")
    assert points  # the first trace ran through a complete apply


@pytest.mark.slow
def test_accept_modified_refuses_a_patched_file_with_an_edit(sandbox: Sandbox) -> None:
    assert sandbox.run("--vllm-version", "0.16").returncode == 0
    generator = sandbox.site / GENERATOR
    generator.write_bytes(generator.read_bytes() + b"# MY EDIT\n")
    r = sandbox.run("--vllm-version", "0.16", "--accept-modified")
    assert r.returncode == 2
    assert r.stderr.strip() == (
        f"patch-speculators: error: {GENERATOR} holds this tool's patch and an edit made outside it: run "
        "rollback first (it keeps the edit in the overlay's history), then edit again and apply with "
        "--accept-modified"
    )
    assert generator.read_bytes().endswith(b"# MY EDIT\n")


@pytest.mark.slow
def test_status_tells_busy_from_interrupted(sandbox: Sandbox, tmp_path: Path) -> None:
    trace = tmp_path / "trace.txt"
    assert sandbox.run("--vllm-version", "0.16", env={"VSP_TEST_TRACE": str(trace)}).returncode == 0
    assert sandbox.run("rollback").returncode == 0
    points = [line.split(" ", 1)[1] for line in trace.read_text().splitlines()]
    # The overlay exists now: the next apply starts at its journal, so count from there.
    pause_at = points.index("apply:journal") + 1 - points.index("json:journal.json")
    with sandbox.paused(pause_at, tmp_path / "paused", "--vllm-version", "0.16") as proc:
        status = json.loads(sandbox.run("status", "--json").stdout)
        assert (status["state"], status["pid"]) == ("busy", str(proc.pid))
    assert proc.returncode == 0


@pytest.mark.slow
def test_callers_git_environment_does_not_leak(sandbox: Sandbox, tmp_path: Path) -> None:
    foreign = tmp_path / "foreign-index"
    env = {"GIT_INDEX_FILE": str(foreign), "GIT_DIR": str(tmp_path / "not-a-repo")}
    assert sandbox.run("--vllm-version", "0.16", env=env).returncode == 0
    assert sandbox.run("rollback", env=env).returncode == 0
    assert not foreign.exists()
    assert pristine(sandbox)


def test_missing_submodule_of_an_installed_package_fails_the_import_check(tmp_path: Path) -> None:
    (tmp_path / "fakevllm").mkdir()
    (tmp_path / "fakevllm" / "__init__.py").write_text("")
    (tmp_path / "uses_new.py").write_text("import fakevllm.v99.request\n")
    (tmp_path / "uses_absent.py").write_text("import torch_that_is_not_here\n")
    proc = run_remote(sys.executable, "import_check.py",
                      stdin=json.dumps({"modules": ["uses_new", "uses_absent"], "own": "speculators"}),
                      cwd=str(tmp_path), env={**os.environ, "PYTHONPATH": str(tmp_path)})
    results = {r["module"]: r["status"] for r in json.loads(proc.stdout)}
    assert results == {"uses_new": "failed", "uses_absent": "missing-dependency"}
    assert not list(tmp_path.rglob("__pycache__"))  # PYTHONDONTWRITEBYTECODE


@pytest.mark.slow
def test_symlinked_file_is_refused(sandbox: Sandbox, tmp_path: Path) -> None:
    generator = sandbox.site / GENERATOR
    store = tmp_path / "store.py"
    store.write_bytes(generator.read_bytes())
    generator.unlink()
    generator.symlink_to(store)
    r = sandbox.run("--vllm-version", "0.16")
    assert r.returncode == 2
    assert r.stderr.splitlines()[-1] == (
        f"patch-speculators: error: {generator} is a symbolic link (a linked install?): reinstall speculators "
        "with copied files (e.g. uv --link-mode=copy) to patch it; nothing was changed"
    )
    assert generator.is_symlink() and store.read_bytes() == generator.read_bytes()
    assert b"kv_cache_specs=kv_cache_spec," in store.read_bytes()


NOTICE_RULE = """\
schema: 1
rules:
  - id: request-block-hasher-notice
    call: vllm.v1.request.Request
    since: "0.12.0"
    missing: [block_hasher]
    notice: pass a block_hasher if prefix caching is on
    why: a notice that stands on speculators 0.3.0
"""


@pytest.mark.slow
def test_check_fails_while_a_notice_stands(sandbox: Sandbox, tmp_path: Path) -> None:
    rules = tmp_path / "notice.yaml"
    rules.write_text(NOTICE_RULE)
    sandbox.extra = ("--rules", str(rules))
    applied = sandbox.run("--vllm-version", "0.16")
    assert applied.returncode == 1
    assert "; 1 notice for a human; " in applied.stdout
    check = sandbox.run("--vllm-version", "0.16", "--check")
    assert check.returncode == 1
    assert check.stdout.splitlines() == [
        f"{GENERATOR}:234: request-block-hasher-notice [notice, unguarded] pass a block_hasher if prefix "
        "caching is on",
        "speculators 0.3.0 is patched for vLLM 0.16, but 1 place needs a human (above)",
    ]
    sandbox.extra = ()
    assert sandbox.run("--vllm-version", "0.16").returncode == 0
    assert sandbox.run("--vllm-version", "0.16", "--check").returncode == 0

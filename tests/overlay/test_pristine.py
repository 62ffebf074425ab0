"""A box with hand edits (issue 18): the pristine bytes from the real speculators 0.3.0 wheel are the
`original`, the edits a `local` commit above it, the rules on top."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import zipfile
from pathlib import Path

import pytest
import realdata
from conftest import WORKER, Sandbox

from vllm_shim_patch.fsutil import record_hash

def _edit(sb: Sandbox) -> bytes:
    """The seed box's kind of edit: the worker changed by hand (here a comment line, before a class)."""
    worker = sb.site / WORKER
    data = worker.read_bytes()
    edited = data.replace(b"\nclass ", b"\n# Kimi-K2.5: the worker hand-patched on the seed box\nclass ", 1)
    assert edited != data
    worker.write_bytes(edited)
    return edited


def _git(sb: Sandbox, *args: str) -> bytes:
    gitdir = next(sb.state.glob("speculators-*/git"))
    return subprocess.run(["git", "--git-dir", str(gitdir), *args], capture_output=True, check=True).stdout


def _isolated(tmp_path: Path, **more: str) -> dict[str, str]:
    """No pip or uv cache of the user's, no pip configuration (no index, no find-links)."""
    (tmp_path / "pip-cache").mkdir(exist_ok=True)
    (tmp_path / "uv-cache").mkdir(exist_ok=True)
    return {"PIP_CACHE_DIR": str(tmp_path / "pip-cache"), "UV_CACHE_DIR": str(tmp_path / "uv-cache"),
            "PIP_CONFIG_FILE": "/dev/null", "PIP_FIND_LINKS": "", "PIP_EXTRA_INDEX_URL": "", **more}


def _wheel_bytes(wheel: Path, path: str) -> bytes:
    with zipfile.ZipFile(wheel) as zf:
        return zf.read(path)


@pytest.mark.slow
def test_hand_edited_worker_is_recorded_as_local_above_a_record_exact_original(
        sandbox: Sandbox, speculators_wheel: Path, tmp_path: Path) -> None:
    pristine = _wheel_bytes(speculators_wheel, WORKER)
    assert record_hash(pristine) == sandbox.record()[WORKER]
    edited = _edit(sandbox)
    r = sandbox.run("--vllm-version", "0.16", "--wheel", str(speculators_wheel), env=_isolated(tmp_path))
    assert r.returncode == 0, r.stderr
    overlay = next(sandbox.state.glob("speculators-*"))
    assert r.stderr.splitlines()[0] == (
        f"1 file of speculators 0.3.0 differs from its RECORD (edited by hand): {WORKER}; recorded the pristine "
        f"original from --wheel {speculators_wheel} (sha256 checked against RECORD) and the installed file as "
        f"'local' on top of it in the overlay {overlay}")
    # original: the wheel's bytes, RECORD-exact; local: the hand edit; patched: the rules on top of it.
    assert _git(sandbox, "show", f"original:{WORKER}") == pristine
    assert _git(sandbox, "show", f"local:{WORKER}") == edited
    assert _git(sandbox, "rev-parse", "local^").strip() == _git(sandbox, "rev-parse", "original").strip()
    assert _git(sandbox, "rev-parse", "patched^").strip() == _git(sandbox, "rev-parse", "local").strip()
    assert _git(sandbox, "log", "--format=%s", "patched").decode().splitlines() == [
        "patch speculators 0.3.0 for vLLM 0.16 (unguarded)",
        f"local: hand edits to speculators 0.3.0, not by this tool ({WORKER})",
        f"original: speculators 0.3.0 as released (RECORD verified; 1 hand-edited file from --wheel "
        f"{speculators_wheel})",
    ]
    body = _git(sandbox, "log", "-1", "--format=%B", "original").decode()
    assert f"Pristine: --wheel {speculators_wheel}: the RECORD-exact bytes of {WORKER}" in body
    assert f"Vsp-Pristine: --wheel {speculators_wheel}" in body
    assert f"\n  {WORKER}\n" in _git(sandbox, "log", "-1", "--format=%B", "local").decode()
    assert f"On top of: local (hand edits not by this tool to {WORKER})" in _git(
        sandbox, "log", "-1", "--format=%B", "patched").decode()
    patched = (sandbox.site / WORKER).read_bytes()
    assert b"# Kimi-K2.5: the worker hand-patched on the seed box\n" in patched  # the edit kept
    assert b"_add_capture_hooks(self, base_model)" in patched  # and the rules applied
    status = json.loads(sandbox.run("status", "--json").stdout)
    assert (status["state"], status["local"]["files"]) == ("patched", [WORKER])
    assert sandbox.run("status").stdout.rstrip().endswith(f"; on top of hand edits not by this tool (local): {WORKER}")
    assert any("[local]" in line and "local: hand edits" in line for line in sandbox.run("log").stdout.splitlines())
    assert json.loads(sandbox.run("--vllm-version", "0.16", "--check", "--json").stdout)["ok"] is True

    back = sandbox.run("rollback")
    assert back.returncode == 0, back.stderr
    assert (sandbox.site / WORKER).read_bytes() == pristine
    assert all(record_hash((sandbox.site / p).read_bytes()) == h for p, h in sandbox.record().items())
    to_local = sandbox.run("rollback", "--to", "local")
    assert to_local.returncode == 0, to_local.stderr
    assert (sandbox.site / WORKER).read_bytes() == edited
    assert sandbox.run("status").stdout.startswith("local: speculators 0.3.0 with its hand edits not by this tool")
    again = sandbox.run("--vllm-version", "0.16", "--no-verify")
    assert again.returncode == 0, again.stderr
    assert (sandbox.site / WORKER).read_bytes() == patched


@pytest.mark.slow
def test_diff_installed_marks_the_users_hunks_apart_from_the_rules(sandbox: Sandbox, speculators_wheel: Path,
                                                                   tmp_path: Path) -> None:
    _edit(sandbox)
    assert sandbox.run("--vllm-version", "0.16", "--no-verify", "--wheel", str(speculators_wheel),
                       env=_isolated(tmp_path)).returncode == 0
    r = sandbox.run("diff", "--installed", "--vllm-version", "0.16")
    assert r.returncode == 0, r.stderr
    local, _, rules = r.stdout.partition("# this tool's rules (each hunk names its rules): 'local' -> installed\n")
    assert local.startswith("# local edits (not by this tool): the pristine original -> 'local'\n"
                            f"--- a/{WORKER}\n+++ b/{WORKER}\n")
    assert "+# Kimi-K2.5: the worker hand-patched on the seed box\n" in local
    # The user's line may be context of a rules' hunk, never a line the rules add or remove.
    assert not any(line.startswith(("+", "-")) and "hand-patched on the seed box" in line for line in rules.splitlines())
    assert rules.count("# Kimi-K2.5: the worker hand-patched on the seed box") == 1  # written once, as context
    assert "@@ worker-request-tracking" not in local
    assert " @@ worker-request-tracking\n" in rules
    assert r.stderr.strip().splitlines()[-1] == (
        "speculators 0.3.0 as installed: 1 file with hand edits not by this tool (local), 2 files changed by the "
        "rules on top")
    files = json.loads(sandbox.run("diff", "--installed", "--vllm-version", "0.16", "--json").stdout)["files"]
    assert [(f["path"], f["by"]) for f in files] == [
        (WORKER, "local"), (WORKER, "rules"), ("speculators/data_generation/vllm_hidden_states_generator.py", "rules")]


@pytest.mark.slow
def test_no_pristine_source_says_so_and_falls_back_to_accept_modified(sandbox: Sandbox, tmp_path: Path) -> None:
    edited = _edit(sandbox)
    before = sandbox.snapshot()
    env = _isolated(tmp_path)
    refused = sandbox.run("--vllm-version", "0.16", "--no-index", env=env)
    assert refused.returncode == 2
    assert refused.stderr.strip() == (
        f"patch-speculators: error: 1 file of speculators 0.3.0 differs from its RECORD (edited by hand already?): "
        f"{WORKER}; no pristine copy of speculators 0.3.0 was found (no --wheel, none in the pip or uv cache, the "
        f"package index not asked (--no-index)); pass --wheel PATH with its wheel, run again with --accept-modified "
        f"to take them as the original, or reinstall with pip install --force-reinstall --no-deps speculators==0.3.0")
    assert sandbox.snapshot() == before
    assert not list(sandbox.state.glob("*/git"))
    ok = sandbox.run("--vllm-version", "0.16", "--no-index", "--no-verify", "--accept-modified", env=env)
    assert ok.returncode == 0, ok.stderr
    assert ok.stderr.splitlines()[0] == (
        "no pristine copy of speculators 0.3.0 was found (no --wheel, none in the pip or uv cache, the package "
        "index not asked (--no-index)); taking the installed files as the original (--accept-modified)")
    assert _git(sandbox, "show", f"original:{WORKER}") == edited  # today's --accept-modified
    assert b"local" not in _git(sandbox, "tag")


@pytest.mark.slow
def test_an_unreachable_index_fails_over_quickly(sandbox: Sandbox, tmp_path: Path) -> None:
    _edit(sandbox)
    env = _isolated(tmp_path, PIP_INDEX_URL="http://127.0.0.1:9/simple")
    start = time.monotonic()
    r = sandbox.run("--vllm-version", "0.16", env=env)
    assert time.monotonic() - start < 60
    assert r.returncode == 2
    assert ("no pristine copy of speculators 0.3.0 was found (no --wheel, none in the pip or uv cache, pip "
            "download speculators==0.3.0 failed: ") in r.stderr
    assert not list(sandbox.state.glob("*/git"))


@pytest.mark.slow
def test_the_index_is_asked_through_pip_download(sandbox: Sandbox, speculators_wheel: Path, tmp_path: Path) -> None:
    # A local index (pip's --find-links, through its own configuration): pip download is really run.
    links = tmp_path / "links"
    links.mkdir()
    shutil.copy(speculators_wheel, links)
    _edit(sandbox)
    env = _isolated(tmp_path, PIP_NO_INDEX="1", PIP_FIND_LINKS=str(links))
    r = sandbox.run("--vllm-version", "0.16", "--no-verify", env=env)
    assert r.returncode == 0, r.stderr
    assert (f"recorded the pristine original from the package index (pip download speculators==0.3.0: "
            f"{speculators_wheel.name}) (sha256 checked against RECORD)") in r.stderr
    assert _git(sandbox, "show", f"original:{WORKER}") == _wheel_bytes(speculators_wheel, WORKER)


@pytest.mark.slow
@pytest.mark.parametrize("cache", ["pip-wheels", "pip-http", "uv"])
def test_a_cached_wheel_is_found_before_the_index(sandbox: Sandbox, speculators_wheel: Path, tmp_path: Path,
                                                  cache: str) -> None:
    env = _isolated(tmp_path)
    if cache == "pip-wheels":
        where = Path(env["PIP_CACHE_DIR"]) / "wheels" / "ab" / "cd" / speculators_wheel.name
    elif cache == "pip-http":
        where = Path(env["PIP_CACHE_DIR"]) / "http-v2" / "a" / "b" / "0123abcd.body"
    else:
        where = Path(env["UV_CACHE_DIR"]) / "archive-v0" / "xyz"
    where.parent.mkdir(parents=True)
    if cache == "uv":
        with zipfile.ZipFile(speculators_wheel) as zf:
            zf.extractall(where)
    else:
        shutil.copy(speculators_wheel, where)
    _edit(sandbox)
    r = sandbox.run("--vllm-version", "0.16", "--no-verify", "--no-index", env=env)
    assert r.returncode == 0, r.stderr
    label = f"the {'uv' if cache == 'uv' else 'pip'} cache ({where})"
    assert f"recorded the pristine original from {label} (sha256 checked against RECORD)" in r.stderr
    assert _git(sandbox, "show", f"original:{WORKER}") == _wheel_bytes(speculators_wheel, WORKER)


@pytest.mark.slow
def test_a_wrong_wheel_is_exit_2_nothing_written(sandbox: Sandbox, speculators_wheel: Path, tmp_path: Path) -> None:
    _edit(sandbox)
    before = sandbox.snapshot()
    other = realdata.speculators_wheel(realdata.NEW_SPECULATORS)
    r = sandbox.run("--vllm-version", "0.16", "--wheel", str(other), "--json", env=_isolated(tmp_path))
    message = (f"--wheel {other}: it is speculators {realdata.NEW_SPECULATORS}, but speculators 0.3.0 is "
               f"installed; give the speculators 0.3.0 wheel the package was installed from; nothing was written")
    assert (r.returncode, json.loads(r.stdout)) == (2, {"ok": False, "error": message, "kind": "UsageError"})
    # The right release, but not the bytes its RECORD lists (a rebuilt or tampered wheel).
    tampered = tmp_path / speculators_wheel.name
    with zipfile.ZipFile(speculators_wheel) as src, zipfile.ZipFile(tampered, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            dst.writestr(info, data + b"# rebuilt\n" if info.filename == WORKER else data)
    r = sandbox.run("--vllm-version", "0.16", "--wheel", str(tampered), env=_isolated(tmp_path))
    assert (r.returncode, r.stderr.strip()) == (2, (
        f"patch-speculators: error: --wheel {tampered}: {WORKER} in it does not match the installed RECORD's "
        f"sha256; give the speculators 0.3.0 wheel the package was installed from; nothing was written"))
    missing = sandbox.run("--vllm-version", "0.16", "--wheel", str(tmp_path / "nope.whl"))
    assert (missing.returncode, missing.stderr.strip()) == (2, (
        f"patch-speculators: error: --wheel {tmp_path / 'nope.whl'}: no such file (give the speculators 0.3.0 "
        f"wheel); nothing was written"))
    assert sandbox.snapshot() == before
    assert not list(sandbox.state.glob("*/git"))

"""Apply, status, log, rollback and drift through the CLI, on the real speculators 0.3.0 wheel."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import GENERATOR, Sandbox

from vllm_shim_patch.fsutil import record_hash


def git_log(sb: Sandbox) -> list[str]:
    gitdir = next(sb.state.glob("speculators-*/git"))
    out = subprocess.run(["git", "--git-dir", str(gitdir), "log", "--format=%s"],
                         capture_output=True, text=True, check=True).stdout
    return out.splitlines()


def assert_pristine(sb: Sandbox) -> None:
    record = sb.record()
    bad = [p for p, digest in record.items() if record_hash((sb.site / p).read_bytes()) != digest]
    assert bad == []


@pytest.mark.slow
def test_apply_status_log_rollback_cycle(sandbox: Sandbox) -> None:
    before = sandbox.snapshot()
    r = sandbox.run("--vllm-version", "0.17")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == (
        "patched speculators 0.3.0 for vLLM 0.17: 22 edits in 2 files; vLLM 0.17 (unguarded); "
        "verification partial: not checked: 2 imports (pydantic missing in the target), "
        "22 calls (no vLLM signatures); rehearsal not run (no vLLM in the target)"
    )
    assert git_log(sandbox) == [
        "patch speculators 0.3.0 for vLLM 0.17 (unguarded)",
        "original: speculators 0.3.0 as installed (RECORD verified)",
    ]
    after = sandbox.snapshot()
    assert [p for p in before if before[p] != after[p]] == ["speculators/data_generation/custom_worker.py", GENERATOR]
    assert b"eos_token_id=" not in after[GENERATOR]
    assert b"kv_cache_specs=" not in after[GENERATOR]
    assert b"block_size=self.vllm_config.cache_config.block_size" in after[GENERATOR]
    # No file of ours inside site-packages.
    assert not list(sandbox.site.rglob(".git")) and not list(sandbox.site.rglob("*.vsp-tmp"))

    status = sandbox.run("status", "--json")
    assert status.returncode == 0
    data = json.loads(status.stdout)
    assert data["state"] == "patched"
    assert data["rules"] == ["worker-request-tracking", "worker-no-eagle3-gate", "worker-capture-hooks",
                             "kv-cache-config-drop-specs",
                             "scheduler-add-block-size", "cache-config-no-prefix-caching",
                             "scheduler-config-add-is-encoder-decoder", "request-drop-eos-token-id",
                             "generator-abort-completed", "generator-results-by-request", "generator-flush-finished",
                             "executor-sample-tokens", "collective-rpc-single-reply"]

    log = sandbox.run("log")
    assert [line.split(" ", 3)[3] for line in log.stdout.splitlines()] == [
        "patch speculators 0.3.0 for vLLM 0.17 (unguarded) [patched]",
        "original: speculators 0.3.0 as installed (RECORD verified) [original]",
    ]

    back = sandbox.run("rollback")
    assert back.returncode == 0, back.stderr
    assert back.stdout.strip() == (
        "rolled back speculators 0.3.0 to original: restored 2 files; sha256 equal to RECORD for all 52 files"
    )
    assert sandbox.snapshot() == before
    assert_pristine(sandbox)
    assert sandbox.run("status").stdout.strip() == "original: speculators 0.3.0 as installed"

    again = sandbox.run("--vllm-version", "0.16")
    assert again.returncode == 0, again.stderr
    assert sandbox.run("status", "--json").stdout.count('"state": "patched"') == 1


@pytest.mark.slow
def test_second_apply_is_a_noop_without_commit(sandbox: Sandbox) -> None:
    assert sandbox.run("--vllm-version", "0.16").returncode == 0
    commits = git_log(sandbox)
    r = sandbox.run("--vllm-version", "0.16")
    assert r.returncode == 0
    assert "already patched for vLLM 0.16: nothing to do" in r.stdout
    assert git_log(sandbox) == commits


@pytest.mark.slow
def test_apply_for_another_series_plans_from_the_original(sandbox: Sandbox) -> None:
    assert sandbox.run("--vllm-version", "0.17").returncode == 0
    assert sandbox.run("--vllm-version", "0.16").returncode == 0
    text = (sandbox.site / GENERATOR).read_text()
    assert "eos_token_id=self.tokenizer.eos_token_id," in text  # 0.16.0 still requires it
    assert "kv_cache_specs=" not in text
    assert sandbox.run("--vllm-version", "0.16", "--check").returncode == 0
    assert sandbox.run("--vllm-version", "0.17", "--check").returncode == 1


@pytest.mark.slow
def test_rollback_to_an_earlier_patched_state(sandbox: Sandbox) -> None:
    assert sandbox.run("--vllm-version", "0.17").returncode == 0
    patched17 = sandbox.snapshot()
    assert sandbox.run("--vllm-version", "0.16").returncode == 0
    log = sandbox.run("log", "--json")
    first_patch = json.loads(log.stdout)["commits"][1]["commit"]
    r = sandbox.run("rollback", "--to", first_patch)
    assert r.returncode == 0, r.stderr
    assert sandbox.snapshot() == patched17
    assert json.loads(sandbox.run("status", "--json").stdout)["vllm"] == "0.17 (no vLLM installed)"


@pytest.mark.slow
def test_reinstall_after_apply_is_drift_then_rebaselined(sandbox: Sandbox, speculators_wheel: Path) -> None:
    assert sandbox.run("--vllm-version", "0.16").returncode == 0
    sandbox.pip_reinstall(speculators_wheel)
    status = sandbox.run("status")
    assert status.stdout.strip() == (
        "drifted: 3 files changed since the last recorded state: "
        f"speculators-0.3.0.dist-info/RECORD, speculators/data_generation/custom_worker.py, {GENERATOR} "
        "(all files match RECORD: reinstalled, e.g. pip install --force-reinstall); "
        "apply records a reinstall as the new original, rollback restores the original"
    )
    r = sandbox.run("--vllm-version", "0.16")
    assert r.returncode == 0, r.stderr
    assert "speculators 0.3.0 was reinstalled (3 files changed, all match RECORD): recorded the installed files as the new original; history kept" in r.stderr
    assert git_log(sandbox)[:2] == [
        "patch speculators 0.3.0 for vLLM 0.16 (unguarded)",
        "original: speculators 0.3.0 reinstalled (RECORD verified)",
    ]
    assert sandbox.run("rollback").returncode == 0
    assert_pristine(sandbox)


@pytest.mark.slow
def test_hand_edited_install_is_refused_then_accepted(sandbox: Sandbox, tmp_path: Path) -> None:
    config = sandbox.site / "speculators/config.py"
    config.write_bytes(config.read_bytes() + b"# local fix\n")
    before = sandbox.snapshot()
    # No pristine copy to be had (empty caches, no index): today's choice, refuse or --accept-modified.
    env = {"PIP_CACHE_DIR": str(tmp_path / "pip"), "UV_CACHE_DIR": str(tmp_path / "uv")}
    r = sandbox.run("--vllm-version", "0.16", "--no-index", env=env)
    assert r.returncode == 2
    assert r.stderr.strip() == (
        "patch-speculators: error: 1 file of speculators 0.3.0 differs from its RECORD (edited by hand already?): "
        "speculators/config.py; no pristine copy of speculators 0.3.0 was found (no --wheel, none in the pip or "
        "uv cache, the package index not asked (--no-index)); pass --wheel PATH with its wheel, run again with "
        "--accept-modified to take them as the original, or reinstall "
        "with pip install --force-reinstall --no-deps speculators==0.3.0"
    )
    assert sandbox.snapshot() == before
    assert not sandbox.state.exists() or not list(sandbox.state.glob("*/git"))
    ok = sandbox.run("--vllm-version", "0.16", "--accept-modified", "--no-index", env=env)
    assert ok.returncode == 0, ok.stderr
    assert git_log(sandbox)[-1] == (
        "original: speculators 0.3.0 as installed (accepted as modified: 1 file differs from RECORD)"
    )
    back = sandbox.run("rollback")
    assert back.returncode == 1
    assert (sandbox.site / "speculators/config.py").read_bytes().endswith(b"# local fix\n")


@pytest.mark.slow
def test_edit_after_apply_is_kept_in_history_by_rollback(sandbox: Sandbox) -> None:
    original = sandbox.snapshot()
    assert sandbox.run("--vllm-version", "0.16").returncode == 0
    config = sandbox.site / "speculators/config.py"
    config.write_bytes(config.read_bytes() + b"# oops\n")
    assert sandbox.run("status").stdout.startswith("drifted: 1 file changed since the last recorded state")
    refused = sandbox.run("--vllm-version", "0.16")
    assert refused.returncode == 2
    assert "changed outside this tool since its last run (edited by hand?): speculators/config.py" in refused.stderr
    back = sandbox.run("rollback")
    assert back.returncode == 0, back.stderr
    assert sandbox.snapshot() == original
    assert git_log(sandbox)[:2] == [
        "rollback speculators 0.3.0 to original (" + git_log_hash(sandbox, "original") + ")",
        "edits made outside this tool to speculators 0.3.0",
    ]


def git_log_hash(sb: Sandbox, ref: str) -> str:
    gitdir = next(sb.state.glob("speculators-*/git"))
    return subprocess.run(["git", "--git-dir", str(gitdir), "rev-parse", "--short=12", ref],
                          capture_output=True, text=True, check=True).stdout.strip()


@pytest.mark.slow
def test_rollback_of_untracked_package_is_a_noop(sandbox: Sandbox) -> None:
    r = sandbox.run("rollback")
    assert r.returncode == 0
    assert r.stdout.strip() == (
        "speculators 0.3.0 is not tracked: it was never patched here and matches its RECORD; nothing to do"
    )


@pytest.mark.slow
def test_stale_bytecode_is_removed(sandbox: Sandbox) -> None:
    cache = sandbox.site / "speculators/data_generation/__pycache__"
    pycs = list(cache.glob("vllm_hidden_states_generator.*.pyc"))
    assert pycs, "pip compiles bytecode at install"
    assert sandbox.run("--vllm-version", "0.16").returncode == 0
    assert list(cache.glob("vllm_hidden_states_generator.*.pyc")) == []
    assert list(cache.glob("config_generator.*.pyc")) != []


@pytest.mark.slow
def test_file_mode_is_kept(sandbox: Sandbox) -> None:
    target = sandbox.site / GENERATOR
    target.chmod(0o640)
    assert sandbox.run("--vllm-version", "0.16").returncode == 0
    assert target.stat().st_mode & 0o777 == 0o640


@pytest.mark.slow
def test_editable_install_is_refused(sandbox: Sandbox) -> None:
    dist = next(sandbox.site.glob("speculators-*.dist-info"))
    (dist / "direct_url.json").write_text(json.dumps({"url": "file:///src/speculators", "dir_info": {"editable": True}}))
    before = sandbox.snapshot()
    r = sandbox.run("--vllm-version", "0.16")
    assert r.returncode == 2
    assert r.stderr.strip() == (
        "patch-speculators: error: speculators is installed in editable mode from file:///src/speculators: "
        "patch that source checkout with git instead"
    )
    assert sandbox.snapshot() == before


@pytest.mark.slow
def test_missing_git_executable(sandbox: Sandbox, tmp_path: Path) -> None:
    r = sandbox.run("--vllm-version", "0.16", env={"PATH": str(tmp_path / "empty-bin")})
    assert r.returncode == 2
    assert r.stderr.strip() == (
        "patch-speculators: error: git executable not found: install git (e.g. apt-get install git) and run again"
    )
    assert_pristine(sandbox)


@pytest.mark.slow
def test_damaged_overlay_is_reported_and_nothing_changes(sandbox: Sandbox) -> None:
    assert sandbox.run("--vllm-version", "0.16").returncode == 0
    before = sandbox.snapshot()
    gitdir = next(sandbox.state.glob("speculators-*/git"))
    for obj in (gitdir / "objects").rglob("*"):
        if obj.is_file():
            obj.chmod(0o644)
            obj.write_bytes(b"garbage")
    r = sandbox.run("--vllm-version", "0.17")
    assert r.returncode == 2
    # Found by the integrity check before git is asked anything: the HEAD commit is the first read.
    overlay = gitdir.parent
    head = (gitdir / "refs" / "heads" / "master").read_text().strip()
    assert r.stderr == (
        f"patch-speculators: error: the overlay {overlay} is damaged: commit {head[:12]} is corrupt (does not "
        f"decompress) in HEAD ({head[:12]}); move the overlay away (mv {overlay} {overlay}.damaged) and run again: "
        f"apply records the original anew from files checked against RECORD; if the installed files differ from "
        f"RECORD, restore them from the wheel first (pip install --force-reinstall --no-deps speculators==0.3.0)\n"
    )
    assert sandbox.snapshot() == before


def test_not_installed_names_the_interpreter(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "vllm_shim_patch", "--package", "no-such-dist", "status"],
                       capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr.strip() == (
        f"patch-speculators: error: no-such-dist is not installed in {sys.executable} "
        "(pass --python with the interpreter of your ML environment)"
    )


def test_interpreter_not_runnable(tmp_path: Path) -> None:
    missing = tmp_path / "nope" / "python"
    r = subprocess.run([sys.executable, "-m", "vllm_shim_patch", "--python", str(missing), "status"],
                       capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr.strip() == (
        f"patch-speculators: error: interpreter {str(missing)!r} not found "
        "(give --python the path of a python executable)"
    )

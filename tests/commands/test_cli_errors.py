"""Input errors: one line, exit 2, nothing written; version strings as vLLM nightlies write them."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import tree
from conftest import GENERATOR, Sandbox, scoped_codemod_rule
from packaging.version import Version

from vllm_shim_patch.errors import UsageError
from vllm_shim_patch.rewrite.plan import resolve_version


@pytest.mark.parametrize(
    ("requested", "installed", "version", "note"),
    [
        pytest.param("0.16", "0.16.0", "0.16", None, id="release"),
        pytest.param("0.16", "0.16.1.dev45+g1a2b3c4.cu129", "0.16", None, id="nightly-after-release"),
        pytest.param("0.10", "0.10.2rc3.dev377+g231c2c63e.cu129", "0.10", None, id="nightly-after-rc"),
        pytest.param("0.16.0", "0.16", "0.16.0", None, id="padded"),
        pytest.param(None, "0.17.0rc1.dev12+gabc.cu129", "0.17.0rc1.dev12+gabc.cu129", None, id="default"),
    ],
)
def test_resolve_version(requested: str | None, installed: str, version: str, note: str | None) -> None:
    assert resolve_version(requested, installed, "py") == (Version(version), note)


def test_bad_version_string() -> None:
    with pytest.raises(UsageError) as info:
        resolve_version("banana", None, "py")
    assert str(info.value) == "--vllm-version 'banana' is not a version like 0.16 or 0.16.1.dev45+g1a2b3c4"


@pytest.mark.slow
def test_no_rule_for_that_version(sandbox: Sandbox) -> None:
    sandbox.extra = ()
    r = sandbox.run("--vllm-version", "0.9", "--dry-run")
    assert r.returncode == 2
    assert r.stderr.strip() == "patch-speculators: error: no rule applies to vLLM 0.9 (the earliest rule is for 0.10.0)"
    assert r.stdout == ""


@pytest.mark.slow
def test_immutable_file_is_reported_and_nothing_changes(sandbox: Sandbox) -> None:
    generator = sandbox.site / GENERATOR
    before = sandbox.snapshot()
    subprocess.run(["chattr", "+i", str(generator)], check=True)
    try:
        r = sandbox.run("--vllm-version", "0.16")
    finally:
        subprocess.run(["chattr", "-i", str(generator)], check=True)
    assert r.returncode == 2
    assert r.stderr.splitlines()[-1] == (
        f"patch-speculators: error: cannot write {generator} (read-only): run as the owner of that "
        "environment; nothing was changed"
    )
    assert sandbox.snapshot() == before
    assert sandbox.run("status").stdout.startswith("original: speculators 0.3.0")


@pytest.mark.slow  # builds our wheel with pip
def test_non_editable_wheel_ships_rules_and_codemods(tmp_path: Path) -> None:
    # Build from a copy: an in-tree build would leave build/ and egg-info in the checkout.
    root = tmp_path / "src"
    shutil.copytree(Path(__file__).resolve().parents[2], root,
                    ignore=shutil.ignore_patterns(".git", "build", "*.egg-info", "__pycache__", ".venv"))
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", str(root),
                            "-w", str(tmp_path / "dist")], check=True, capture_output=True, text=True)
    assert "Warning" not in build.stdout + build.stderr, build.stdout + build.stderr
    wheel = next((tmp_path / "dist").glob("vllm_shim_patch-*.whl"))
    with zipfile.ZipFile(wheel) as zf:
        shipped = {n for n in zf.namelist() if n.endswith(".py")}
    src = root / "src"
    assert shipped >= {str(p.relative_to(src)) for p in (src / "vllm_shim_patch").rglob("*.py")}
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target),
                    str(wheel)], check=True, capture_output=True)
    r = subprocess.run([sys.executable, "-m", "vllm_shim_patch", "rules", "list"],
                       capture_output=True, text=True, cwd=tmp_path,
                       env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    # The wheel's pack is the tree's rules/*.yaml, in order, and every codemod they name loads from it.
    rows = [line.split() for line in r.stdout.splitlines()]
    assert [row[0] for row in rows] == tree.rule_ids()
    assert sum(row[3] == "codemod" for row in rows) == sum("codemod" in ops for _, _, ops, _ in tree.rules()) > 0
    assert (target / "vllm_shim_patch" / "_remote" / "probe_target.py").is_file()
    assert (target / "vllm_shim_patch" / "codemods" / "executor_sample_tokens.py").is_file()


@pytest.mark.slow
def test_undeletable_bytecode_does_not_stop_the_transaction(sandbox: Sandbox) -> None:
    cache = sandbox.site / "speculators/data_generation/__pycache__"
    subprocess.run(["chattr", "+i", str(cache)], check=True)
    try:
        r = sandbox.run("--vllm-version", "0.16")
    finally:
        subprocess.run(["chattr", "-i", str(cache)], check=True)
    assert r.returncode == 0, r.stderr
    assert sandbox.run("--vllm-version", "0.16", "--check").returncode == 0
    assert sandbox.run("status", "--json").stdout.count('"state": "patched"') == 1


@pytest.mark.slow
def test_a_codemod_that_breaks_on_a_file_writes_nothing(sandbox: Sandbox, tmp_path: Path) -> None:
    rules = scoped_codemod_rule(tmp_path, "breaks", "speculators.data_generation.custom_worker",
                                "raise RuntimeError('broken codemod')")
    before = sandbox.snapshot()
    r = sandbox.run("--rules", str(rules), "--vllm-version", "0.16")
    assert r.returncode == 1, r.stderr
    assert r.stdout.strip() == (
        "nothing written: speculators/data_generation/custom_worker.py: "
        "rule breaks: codemod 'breaks' RuntimeError: broken codemod"
    )
    assert sandbox.snapshot() == before


def test_an_interrupt_is_exit_130_with_json(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Ctrl-C is not a failed check (exit 1) nor bad input (2); a --json reader still gets JSON."""
    import json

    from vllm_shim_patch import cli

    def interrupted(*_: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_context", interrupted)  # as if Ctrl-C came while the target answered
    with pytest.raises(SystemExit) as exit_:
        cli.main.main(["--python", sys.executable, "status", "--json"])
    assert exit_.value.code == 130
    out, err = capsys.readouterr()
    assert json.loads(out) == {"ok": False, "error": "interrupted", "kind": "Interrupted"}
    assert err.endswith("patch-speculators: interrupted\n")


@pytest.mark.slow
@pytest.mark.parametrize("where", ["missing", "file"])
def test_vllm_source_that_is_no_source_is_one_line(sandbox: Sandbox, tmp_path: Path, where: str) -> None:
    path = tmp_path / "vllm-0.16.0.whl"
    if where == "file":
        path.write_text("not a wheel")
    r = sandbox.run("--vllm-source", str(path), "audit")
    what = "no such file or folder" if where == "missing" else "neither a folder nor a wheel"
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == (f"patch-speculators: error: --vllm-source {path}: {what} (give vLLM's source folder "
                        "or its wheel)\n")

"""Rollback and apply never write another release's bytes or bytes the overlay did not record: a
release installed over the overlay, a venv path reused, one overlay reached from two venvs, a
duplicated RECORD line, a linked module, the original's tag moved."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import realdata
from conftest import GENERATOR, Sandbox, _make_venv
from tampering import error, git, overlay_of
from test_overlay import assert_pristine

from vllm_shim_patch.overlay.layout import overlay_path

INIT = "speculators/__init__.py"
WORKER = "speculators/data_generation/custom_worker.py"


def _edit(sb: Sandbox, path: str = INIT) -> None:
    target = sb.site / path
    target.write_bytes(target.read_bytes() + b"# a local fix\n")


def _foreign(installed: str, recorded: str, files: str = INIT) -> str:
    return error(
        f"speculators {installed} is installed where the overlay recorded speculators {recorded}, and 1 file of "
        f"speculators {installed} differs from its RECORD: {files}; the overlay holds no original of speculators "
        f"{installed}, so nothing was written: reinstall it (pip install --force-reinstall --no-deps "
        f"speculators=={installed}) and run again; rollback never writes another release's files")


@pytest.mark.slow
def test_rollback_never_writes_another_releases_original(sandbox: Sandbox, speculators_wheel: Path) -> None:
    sandbox.pip_reinstall(realdata.speculators_wheel("0.4.0"))
    assert sandbox.run("--vllm-version", "0.16").returncode in (0, 1)
    assert overlay_of(sandbox).is_dir()
    sandbox.pip_reinstall(speculators_wheel)
    _edit(sandbox)
    before = sandbox.snapshot()
    r = sandbox.run("rollback")
    assert (r.returncode, r.stderr) == (2, _foreign("0.3.0", "0.4.0"))
    assert sandbox.snapshot() == before
    # Reinstalled as pip wrote it, 0.3.0 is its own original: nothing to write, nothing of 0.4.0.
    sandbox.pip_reinstall(speculators_wheel)
    again = sandbox.run("rollback")
    assert again.returncode == 0, again.stderr
    assert again.stdout == ("speculators 0.3.0 is already at original: nothing to do "
                            "(sha256 equal to RECORD for all 52 files)\n")
    assert_pristine(sandbox)


@pytest.mark.slow
def test_apply_accepting_edits_of_another_release_grafts_nothing(sandbox: Sandbox, speculators_wheel: Path) -> None:
    sandbox.pip_reinstall(realdata.speculators_wheel("0.4.0"))
    assert sandbox.run("--vllm-version", "0.16").returncode in (0, 1)
    sandbox.pip_reinstall(speculators_wheel)
    _edit(sandbox)
    edited = sandbox.snapshot()
    refused = sandbox.run("--vllm-version", "0.16")
    assert refused.returncode == 2
    assert refused.stderr.startswith(error("speculators 0.3.0 is installed where the overlay recorded speculators "
                                           "0.4.0, and 1 file")[:-1])
    assert sandbox.snapshot() == edited
    ok = sandbox.run("--vllm-version", "0.16", "--accept-modified")
    assert ok.returncode == 0, ok.stderr
    back = sandbox.run("rollback")
    assert back.returncode == 1, back.stderr
    # The original is 0.3.0 with the edit, every other file 0.3.0's own: no byte of 0.4.0.
    assert sandbox.snapshot() == edited


@pytest.mark.slow
def test_venv_path_reused_for_another_release(sandbox: Sandbox) -> None:
    assert sandbox.run("--vllm-version", "0.16").returncode == 0
    shutil.rmtree(sandbox.root)
    _make_venv(sandbox.root, realdata.speculators_wheel("0.4.0"))
    _edit(sandbox)
    before = sandbox.snapshot()
    r = sandbox.run("rollback")
    assert (r.returncode, r.stderr) == (2, _foreign("0.4.0", "0.3.0"))
    assert sandbox.snapshot() == before


@pytest.mark.slow
def test_one_overlay_reached_from_two_venvs(sandbox: Sandbox, sandbox_template: Path, tmp_path: Path) -> None:
    assert sandbox.run("--vllm-version", "0.16").returncode == 0
    root = tmp_path / "venv2"
    shutil.copytree(sandbox_template, root, symlinks=True)
    other = Sandbox(root, root / "bin" / "python", next(root.glob("lib/python3*/site-packages")), sandbox.state)
    _edit(other)
    mine, theirs = overlay_of(sandbox), overlay_path(sandbox.state, "speculators", other.site.resolve())
    theirs.symlink_to(mine)
    before, patched = other.snapshot(), sandbox.snapshot()
    for command in (["rollback"], ["--vllm-version", "0.17"], ["status"]):
        r = other.run(*command)
        assert (r.returncode, r.stderr) == (2, error(
            f"the overlay {theirs} is a symbolic link (to {mine}): an overlay records one environment, never two; "
            f"remove the link (rm {theirs}) and run again; nothing was changed"))
    theirs.unlink()
    shutil.copytree(mine, theirs, symlinks=True)
    r = other.run("rollback")
    assert (r.returncode, r.stderr) == (2, error(
        f"the overlay {theirs} was recorded for speculators in {sandbox.site.resolve()}, not in "
        f"{other.site.resolve()} (one overlay reached from two environments?): give this one its own (pass another "
        f"--state-dir, or move {theirs} away) and run again; nothing was changed"))
    assert other.snapshot() == before
    assert sandbox.snapshot() == patched


@pytest.mark.slow
def test_duplicated_record_line(sandbox: Sandbox) -> None:
    record = next(sandbox.site.glob("speculators-*.dist-info")) / "RECORD"
    lines = record.read_text().splitlines(keepends=True)
    record.write_text("".join(lines) + next(line for line in lines if line.startswith(GENERATOR + ",")))
    before = sandbox.snapshot()
    r = sandbox.run("--vllm-version", "0.16")
    assert r.returncode == 0, r.stderr
    assert sandbox.run("status").stdout.startswith(
        "patched (not rehearsed: no vLLM in the target): speculators 0.3.0 for vLLM 0.16")
    back = sandbox.run("rollback")
    assert back.returncode == 0, back.stderr
    assert back.stdout == ("rolled back speculators 0.3.0 to original: restored 2 files; sha256 equal to RECORD "
                           "for all 52 files\n")
    assert sandbox.snapshot() == before


@pytest.mark.slow
def test_symlinked_module_is_refused_before_anything_is_recorded(sandbox: Sandbox, tmp_path: Path) -> None:
    module = sandbox.site / GENERATOR
    elsewhere = tmp_path / "elsewhere.py"
    elsewhere.write_bytes(module.read_bytes())
    module.unlink()
    module.symlink_to(elsewhere)
    kept = elsewhere.read_bytes()
    r = sandbox.run("--vllm-version", "0.16")
    assert (r.returncode, r.stderr) == (2, error(
        f"{sandbox.site.resolve() / GENERATOR} is a symbolic link (a linked install?): reinstall speculators with "
        f"copied files (e.g. uv --link-mode=copy) to patch it; nothing was changed"))
    assert not sandbox.state.exists()
    assert sandbox.run("status").stdout.startswith("not tracked: speculators 0.3.0 was never patched by this tool")
    assert elsewhere.read_bytes() == kept


@pytest.mark.slow
def test_original_tag_moved_off_record_is_refused_before_writing(sandbox: Sandbox) -> None:
    assert sandbox.run("--vllm-version", "0.16").returncode == 0
    overlay = overlay_of(sandbox)
    git(overlay / "git", "tag", "-f", "original", "patched")
    patched = git(overlay / "git", "rev-parse", "patched")
    before = sandbox.snapshot()
    r = sandbox.run("rollback")
    assert (r.returncode, r.stderr) == (2, error(
        f"the overlay's original ({patched[:12]}) does not match speculators 0.3.0's RECORD: 2 files differ "
        f"({WORKER}, {GENERATOR}), so nothing was written; the overlay was changed outside this tool: move it away "
        f"(mv {overlay} {overlay}.damaged) and reinstall with pip install --force-reinstall --no-deps "
        f"speculators==0.3.0"))
    assert sandbox.snapshot() == before


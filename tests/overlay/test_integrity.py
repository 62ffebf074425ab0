"""Issue 11: a damaged overlay (records unreadable, objects missing or corrupt) stops every command."""

from __future__ import annotations

import json
import subprocess
import zlib
from pathlib import Path

import pytest
from conftest import GENERATOR, Sandbox, write_tree

from vllm_shim_patch.errors import DamagedOverlayError
from vllm_shim_patch.fsutil import record_hash
from vllm_shim_patch.overlay.integrity import check_overlay, recovery
from vllm_shim_patch.overlay.repo import Overlay

FILES = {"pkg/__init__.py": b"", "pkg/mod.py": b"X(a, eos=1)\n", "pkg/sub/deep.py": b"Y()\n"}


@pytest.fixture
def ov(tmp_path: Path) -> Overlay:
    work = write_tree(tmp_path / "site", FILES)
    overlay = Overlay(tmp_path / "state" / "pkg-0123456789ab", work)
    head = overlay.create(sorted(FILES), "original\n")
    hashes = {p: record_hash(d) for p, d in FILES.items()}
    overlay.save_state(files=sorted(FILES), head=hashes, original=hashes, head_commit=head, original_commit=head,
                       trailers={"kind": "baseline"}, when="2026-01-01T00:00:00", package="pkg", version="1.0",
                       location=str(work))
    return overlay


def _damaged(ov: Overlay, what: str) -> str:
    with pytest.raises(DamagedOverlayError) as info:
        check_overlay(ov.path, "pkg", "1.0")
    assert str(info.value) == f"{what}; {recovery(ov.path, 'pkg', '1.0')}"
    return str(info.value)


def _object(ov: Overlay, spec: str) -> Path:
    sha = ov.git("rev-parse", spec).strip()
    return ov.gitdir / "objects" / sha[:2] / sha[2:]


def test_an_intact_overlay_passes(ov: Overlay) -> None:
    check_overlay(ov.path, "pkg", "1.0")
    assert recovery(ov.path, "pkg", "1.0") == (
        f"move the overlay away (mv {ov.path} {ov.path}.damaged) and run again: apply records the original anew "
        f"from files checked against RECORD; if the installed files differ from RECORD, restore them from the "
        f"wheel first (pip install --force-reinstall --no-deps pkg==1.0)"
    )


def test_a_packed_overlay_passes(ov: Overlay) -> None:
    ov.git("gc", "-q")
    ov.git("pack-refs", "--all")
    assert not (ov.gitdir / "refs" / "tags" / "original").exists()
    check_overlay(ov.path, "pkg", "1.0")


@pytest.mark.parametrize(("spec", "what"), [("original:pkg/sub/deep.py", "blob"), ("original:pkg/sub", "tree"),
                                            ("original^{tree}", "tree"), ("original", "commit")])
def test_missing_object(ov: Overlay, spec: str, what: str) -> None:
    path = _object(ov, spec)
    sha = path.parent.name + path.name
    path.unlink()
    detail = " (the bytes of pkg/sub/deep.py)" if what == "blob" else ""
    head = ov.head_commit() or ""
    _damaged(ov, f"the overlay {ov.path} is damaged: {what} {sha[:12]} is missing{detail} in HEAD ({head[:12]})")


def test_corrupt_blob(ov: Overlay) -> None:
    path = _object(ov, "original:pkg/mod.py")
    sha = path.parent.name + path.name
    path.chmod(0o644)
    path.write_bytes(zlib.compress(b"blob 12\0X(a, eos=2)\n"))
    head = ov.head_commit() or ""
    _damaged(ov, f"the overlay {ov.path} is damaged: blob {sha[:12]} is corrupt (its bytes do not match its name) "
                 f"(the bytes of pkg/mod.py) in HEAD ({head[:12]})")
    path.write_bytes(b"not zlib")
    _damaged(ov, f"the overlay {ov.path} is damaged: blob {sha[:12]} is corrupt (does not decompress) "
                 f"(the bytes of pkg/mod.py) in HEAD ({head[:12]})")


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (b"", "empty"),
        (b"{not json", "not JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"),
        (b"[]", "a JSON list, not an object"),
        (b"{}", "'files' is missing or not a list"),
        (None, "'head' is missing or not a dict"),
    ],
    ids=["empty", "invalid", "list", "empty-object", "wrong-shape"],
)
def test_unreadable_state_json(ov: Overlay, content: bytes | None, why: str) -> None:
    if content is None:
        data = json.loads(ov.state_file.read_text())
        data["head"] = ["pkg/mod.py"]
        content = json.dumps(data).encode()
    ov.state_file.write_bytes(content)
    _damaged(ov, f"{ov.state_file} is damaged ({why})")


@pytest.mark.parametrize(
    ("journal", "why"),
    [
        (b"", "empty"),
        (b'{"op": "apply"', "not JSON: Expecting ',' delimiter: line 1 column 15 (char 14)"),
        (b'"apply"', "a JSON str, not an object"),
        (b'{"op": "apply", "base_commit": "x", "files": {"pkg/mod.py": "after"}}',
         "the entry of 'pkg/mod.py' is of the wrong shape"),
        (b'{"op": "rm -rf", "base_commit": "x", "files": {}}', "unknown operation 'rm -rf'"),
        (b'{"op": "rollback", "base_commit": "x", "files": {}}', "'to_commit' is missing or not a str"),
    ],
    ids=["empty", "invalid", "string", "entry", "op", "rollback-without-target"],
)
def test_unreadable_journal(ov: Overlay, journal: bytes, why: str) -> None:
    ov.journal_file.write_bytes(journal)
    _damaged(ov, f"{ov.journal_file} is damaged ({why})")


def test_records_naming_something_else_than_a_commit(ov: Overlay) -> None:
    ov.journal_file.write_text(json.dumps({"op": "apply", "base_commit": "HEAD~1", "files": {}}))
    _damaged(ov, f"{ov.journal_file} is damaged (the interrupted apply's base commit is 'HEAD~1', not a commit)")
    ov.clear_journal()
    data = json.loads(ov.state_file.read_text())
    ov.state_file.write_text(json.dumps({**data, "original_commit": "../../etc/passwd"}))
    _damaged(ov, f"{ov.state_file} is damaged (the recorded original is '../../etc/passwd', not a commit)")


def test_journal_naming_a_missing_commit(ov: Overlay) -> None:
    ov.journal_file.write_text(json.dumps({"op": "apply", "base_commit": "ab" * 20, "files": {}}))
    _damaged(ov, f"the overlay {ov.path} is damaged: commit {'ab' * 6} is missing in the interrupted apply's "
                 f"base commit ({'ab' * 6})")


def test_state_without_a_repository(ov: Overlay) -> None:
    subprocess.run(["rm", "-rf", str(ov.gitdir)], check=True)
    _damaged(ov, f"the overlay {ov.path} has a state.json or journal.json but no git repository")


# -- every command, on the real package ---------------------------------------------------------

COMMANDS = [["status"], ["--vllm-version", "0.16"], ["--dry-run", "--vllm-version", "0.16"],
            ["--check", "--vllm-version", "0.16"], ["rollback"], ["log"], ["diff", "--vllm-version", "0.16"]]


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["original-blob", "state-json", "journal"])
def test_every_command_stops_on_a_damaged_overlay(sandbox: Sandbox, damage: str) -> None:
    assert sandbox.run("--vllm-version", "0.16").returncode == 0
    overlay = next(sandbox.state.iterdir())
    if damage == "original-blob":
        sha = subprocess.run(["git", "--git-dir", str(overlay / "git"), "rev-parse", f"original:{GENERATOR}"],
                             capture_output=True, text=True, check=True).stdout.strip()
        (overlay / "git" / "objects" / sha[:2] / sha[2:]).unlink()
        what = (f"the overlay {overlay} is damaged: blob {sha[:12]} is missing (the bytes of {GENERATOR}) in the "
                f"original")
    elif damage == "state-json":
        (overlay / "state.json").write_text("")
        what = f"{overlay}/state.json is damaged (empty)"
    else:
        (overlay / "journal.json").write_text("{")
        what = f"{overlay}/journal.json is damaged (not JSON: Expecting property name enclosed in double quotes"
    before = sandbox.snapshot()
    for command in COMMANDS:
        r = sandbox.run("--json", *command)
        assert r.returncode == 2, (command, r.stdout, r.stderr)
        line = r.stderr.splitlines()[-1]
        assert line.startswith(f"patch-speculators: error: {what}"), (command, line)
        assert line.endswith("(pip install --force-reinstall --no-deps speculators==0.3.0)"), (command, line)
        assert json.loads(r.stdout)["kind"] == "DamagedOverlayError", command
        assert "already patched" not in r.stdout + r.stderr
    assert sandbox.snapshot() == before
    # The recovery the message gives works: move the overlay away, restore from the wheel, apply.
    overlay.rename(overlay.with_name(overlay.name + ".damaged"))
    assert sandbox.run("rollback").returncode == 1  # patched files differ from RECORD: reinstall first
    sandbox.pip_reinstall(Path(__import__("realdata").speculators_wheel()))
    assert sandbox.run("--vllm-version", "0.16").returncode == 0
    assert sandbox.run("rollback").returncode == 0

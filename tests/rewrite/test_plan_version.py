"""Which vLLM version rules are for: --vllm-version, the --vllm-source's own version, the installed
vLLM; a --vllm-version that contradicts either is an error (exit 2), never a silent guess."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest
import realdata
from conftest import EDITS, SANDBOX_IMPORTS_COUNT, Sandbox, write_tree
from packaging.version import Version

from vllm_shim_patch.errors import TargetError, UsageError
from vllm_shim_patch.rewrite.plan import resolve_version
from vllm_shim_patch.versions import source_version

META = b"Metadata-Version: 2.1\nName: vllm\nVersion: 0.16.0\n\nlong description\nVersion: 9\n"
SCM = b"__all__ = []\nversion: str\n__version__ = version = '0.17.0rc1.dev5+gabc'\n"


@pytest.mark.parametrize(("files", "expected"), [
    pytest.param({"vllm-0.16.0.dist-info/METADATA": META, "vllm/_version.py": SCM}, "0.16.0", id="dist-info-first"),
    pytest.param({"vllm/_version.py": SCM, "vllm/__init__.py": b""}, "0.17.0rc1.dev5+gabc", id="setuptools-scm"),
    pytest.param({"vllm/version.py": b"__version__ = '0.10.1'\n"}, "0.10.1", id="old-version-py"),
    pytest.param({"vllm/version.py": b"from ._version import __version__\n"}, None, id="none"),
    pytest.param({"vllm-0.1.dist-info/METADATA": b"Name: other\nVersion: 1\n", "vllm/__init__.py": b""}, None,
                 id="not-vllm-metadata"),
])
def test_source_version_from_a_folder(tmp_path: Path, files: dict[str, bytes], expected: str | None) -> None:
    assert source_version(write_tree(tmp_path, files)) == expected


def test_source_version_from_a_wheel(tmp_path: Path) -> None:
    wheel = tmp_path / "vllm-0.16.0-cp38-abi3-manylinux1_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("vllm/__init__.py", "")
        zf.writestr("vllm-0.16.0.dist-info/METADATA", META.decode())
    assert source_version(wheel) == "0.16.0"
    assert source_version(tmp_path / "missing.whl") is None


@pytest.mark.parametrize(("requested", "installed", "source", "version", "note"), [
    pytest.param(None, None, ("/s", "0.16.0"), "0.16.0",
                 "vLLM is not installed in py: rules selected for the vLLM source given with --vllm-source (0.16.0)",
                 id="source-alone"),
    pytest.param("0.16", None, ("/s", "0.16.0"), "0.16",
                 "vLLM is not installed in py: guards read the vLLM source given with --vllm-source", id="agrees"),
    pytest.param("0.17", None, ("/s", None), "0.17",
                 "vLLM is not installed in py: guards read the vLLM source given with --vllm-source",
                 id="source-without-version"),
    pytest.param(None, "0.16.0", ("/s", "0.17.0"), "0.17.0",
                 "the vLLM source given with --vllm-source is 0.17.0, the installed vLLM 0.16.0: "
                 "rules and guards follow the source", id="source-over-installed"),
    pytest.param(None, "0.16.0", ("/s", "0.16.0"), "0.16.0", None, id="source-is-installed"),
    pytest.param("0.16", None, None, "0.16",
                 "vLLM is not installed in py: rules selected for --vllm-version 0.16 alone", id="no-vllm"),
])
def test_resolve_version_with_a_source(requested: str | None, installed: str | None,
                                       source: tuple[str, str | None], version: str, note: str | None) -> None:
    assert resolve_version(requested, installed, "py", source) == (Version(version), note)


@pytest.mark.parametrize(("requested", "installed", "source", "message"), [
    pytest.param("0.16", "0.17.0", None,
                 "--vllm-version 0.16 does not match the installed vLLM 0.17.0 in py: leave out --vllm-version, "
                 "or give --python the interpreter that has vLLM 0.16", id="installed"),
    pytest.param("0.17", None, ("/s", "0.16.0"),
                 "--vllm-version 0.17 does not match the vLLM source /s (0.16.0): leave out --vllm-version, "
                 "or give --vllm-source the vLLM 0.17 source", id="source"),
    pytest.param("0.16.1", None, ("/s", "0.16.0"),
                 "--vllm-version 0.16.1 does not match the vLLM source /s (0.16.0): leave out --vllm-version, "
                 "or give --vllm-source the vLLM 0.16.1 source", id="patch-release"),
])
def test_a_contradicting_version_is_an_error(requested: str, installed: str | None,
                                             source: tuple[str, str | None] | None, message: str) -> None:
    with pytest.raises(UsageError) as info:
        resolve_version(requested, installed, "py", source)
    assert str(info.value) == message


def test_a_source_without_version_and_no_vllm_needs_the_option() -> None:
    with pytest.raises(TargetError) as info:
        resolve_version(None, None, "py", ("/s", None))
    assert str(info.value) == (
        "no vLLM installed in py, and the vLLM source /s carries no version (no vllm-*.dist-info, "
        "no vllm/_version.py): pass --vllm-version (e.g. --vllm-version 0.16)")


def test_no_vllm_and_no_option_names_both_ways_out() -> None:
    with pytest.raises(TargetError) as info:
        resolve_version(None, None, "py", None)
    assert str(info.value) == (
        "no vLLM installed in py: give --vllm-source the vLLM source folder or wheel to check against "
        "(it carries its version), or pass --vllm-version (e.g. 0.16)")


@pytest.mark.slow
@pytest.mark.parametrize("args", [[], ["--check"], ["--dry-run"], ["audit"]], ids=["apply", "check", "dry-run", "audit"])
@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_source_and_version_that_disagree_stop_every_command(sandbox: Sandbox, args: list[str], as_json: bool) -> None:
    src = realdata.vllm_source(realdata.REFERENCE_VLLM)
    before = sandbox.snapshot()
    extra = ["--json"] if as_json else []
    r = sandbox.run("--vllm-source", str(src), *args, "--vllm-version", "0.17", *extra)
    message = (f"--vllm-version 0.17 does not match the vLLM source {src} ({realdata.REFERENCE_VLLM}): "
               f"leave out --vllm-version, or give --vllm-source the vLLM 0.17 source")
    assert (r.returncode, r.stderr) == (2, f"patch-speculators: error: {message}\n")
    if as_json:
        assert json.loads(r.stdout) == {"ok": False, "error": message, "kind": "UsageError"}
    else:
        assert r.stdout == ""
    assert sandbox.snapshot() == before
    assert not sandbox.state.exists() or not any(sandbox.state.rglob("*.json"))


@pytest.mark.slow
def test_the_source_alone_is_enough(sandbox: Sandbox) -> None:
    src = realdata.vllm_source(realdata.REFERENCE_VLLM)
    r = sandbox.run("--vllm-source", str(src), "--dry-run")
    assert r.returncode == 0, r.stderr
    assert r.stderr.splitlines()[0] == (f"note: vLLM is not installed in {sandbox.python}: rules selected for the "
                                        f"vLLM source given with --vllm-source ({realdata.REFERENCE_VLLM})")
    assert r.stderr.splitlines()[-1] == f"{EDITS} edits in 2 files; vLLM {realdata.REFERENCE_VLLM} (static)"
    a = sandbox.run("--vllm-source", str(src), "audit")
    assert a.returncode == 0, a.stderr
    assert a.stdout.splitlines()[-1] == (
        f"74 uses: 71 ok, 3 fixed by the rules, 0 still mismatched, 0 unknown; {SANDBOX_IMPORTS_COUNT}")

"""vllm_source.py: one reader of a vLLM source (a folder or a wheel), relative imports, scope strings."""

from __future__ import annotations

import ast
import zipfile
from pathlib import Path

import pytest
from conftest import write_tree

from vllm_shim_patch.signatures import StaticSignatures
from vllm_shim_patch.vllm_source import VllmSource, parse_scope, resolve_relative, unwrap_annotation
from vllm_shim_patch.versions import source_version

FILES = {
    "vllm/__init__.py": b"",
    "vllm/b.py": b"B = 1\n",
    "vllm/a/__init__.py": b"",
    "vllm/a/x.py": b"X = 1\n",
    "vllm/a/data.txt": b"not python\n",
    "vllm-9.9.9.dist-info/METADATA": b"Name: vllm\nVersion: 9.9.9\n",
    "other/y.py": b"Y = 1\n",
}


def _wheel(tmp_path: Path) -> Path:
    wheel = tmp_path / "vllm-9.9.9-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for rel in sorted(FILES, reverse=True):  # the zip's order is not the sorted one
            zf.writestr(rel, FILES[rel])
    return wheel


@pytest.fixture(params=["folder", "wheel"])
def root(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    return write_tree(tmp_path / "site", FILES) if request.param == "folder" else _wheel(tmp_path)


def test_reads_a_folder_and_a_wheel_alike(root: Path) -> None:
    with VllmSource(root) as source:
        assert source.is_wheel is root.is_file()
        assert source.read("vllm/b.py") == b"B = 1\n"
        assert source.read("vllm/nothing.py") is None
        assert source.read("vllm/a") is None  # a directory is no file
        assert source.is_dir("vllm/a")[0] is True and source.is_dir("vllm/b.py")[0] is False
        assert source.is_dir("vllm/none")[0] is False
        assert source.dist_info("METADATA") == ["vllm-9.9.9.dist-info/METADATA"]
        got = dict(source.sources())
        assert got == {"vllm/__init__.py": b"", "vllm/b.py": b"B = 1\n", "vllm/a/__init__.py": b"",
                       "vllm/a/x.py": b"X = 1\n"}  # .py files under vllm/ only
        assert [rel for rel, _ in source.sources(where=lambda rel: "/a/" in rel)] == sorted(
            ["vllm/a/__init__.py", "vllm/a/x.py"], reverse=source.is_wheel)
    assert source_version(root) == "9.9.9"


def test_a_folder_is_stamped_and_walked(tmp_path: Path) -> None:
    root = write_tree(tmp_path / "site", {**FILES, "vllm/__pycache__/b.cpython-311.pyc": b""})
    source = VllmSource(root)
    data, seen = source.read_stamped("vllm/b.py")
    assert data == b"B = 1\n" and seen is not None and seen[:2] == ("f", 6)
    assert source.read_stamped("vllm/gone.py") == (None, None)  # an absent path is recorded too
    assert source.is_dir("vllm/a") == (True, ("d", 0, 0))
    # In sorted order, as rglob finds them (a package's files after its subpackages' at the same name).
    assert [rel for rel, _ in source.sources()] == ["vllm/__init__.py", "vllm/a/__init__.py", "vllm/a/x.py",
                                                    "vllm/b.py"]
    walked = {rel: sorted(files) for rel, _, files in source.walk()}
    assert walked == {"vllm": ["__init__.py", "b.py"], "vllm/a": ["__init__.py", "data.txt", "x.py"]}
    assert source.names() == [] and not source.closed  # nothing to close
    # A dist-info is listed whether or not it holds the file (a RECORD may appear later).
    assert source.dist_info("RECORD") == ["vllm-9.9.9.dist-info/RECORD"]


def test_a_wheel_is_opened_once_and_closed(tmp_path: Path) -> None:
    root = _wheel(tmp_path)
    with VllmSource(root) as source:
        assert not source.closed
        assert source.names()[0] == "vllm/b.py"  # the zip's own order
        assert list(source.walk()) == []
    assert source.closed
    with pytest.raises(ValueError, match="closed"):
        source.read("vllm/b.py")
    with StaticSignatures(root) as static:
        assert static.get("vllm.b.B") is None  # an int, not a callable: answered, not a crash
    assert static.names.source.closed
    # A reader that refuses the source closes it before it says so.
    empty = tmp_path / "empty.whl"
    with zipfile.ZipFile(empty, "w") as zf:
        zf.writestr("other/y.py", "")
    from vllm_shim_patch.errors import SignatureError

    with pytest.raises(SignatureError, match="no vllm package under"):
        StaticSignatures(empty)


def test_what_is_not_a_source(tmp_path: Path) -> None:
    bad = tmp_path / "bad.whl"
    bad.write_bytes(b"not a zip")
    with pytest.raises(zipfile.BadZipFile):
        VllmSource(bad)
    nothing = VllmSource(tmp_path / "missing")  # a folder that is not there holds nothing
    assert nothing.read("vllm/__init__.py") is None and list(nothing.sources()) == []
    assert source_version(bad) is None and source_version(tmp_path / "missing") is None


@pytest.mark.parametrize(("package", "level", "name", "expected"), [
    pytest.param("vllm.a", 0, "os.path", "os.path", id="absolute"),
    pytest.param("vllm.a", 0, None, "", id="absolute-none"),
    pytest.param("vllm.a", 1, "x", "vllm.a.x", id="sibling"),
    pytest.param("vllm.a", 1, None, "vllm.a", id="the-package"),
    pytest.param("vllm.a", 2, "b", "vllm.b", id="parent"),
    pytest.param("vllm.a", 2, None, "vllm", id="the-top"),
    pytest.param("vllm.a", 3, "b", None, id="beyond-the-top"),
    pytest.param("", 1, "x", None, id="a-top-level-module"),
])
def test_resolve_relative(package: str, level: int, name: str | None, expected: str | None) -> None:
    assert resolve_relative(package, level, name) == expected


def test_every_relative_import_reader_agrees(tmp_path: Path) -> None:
    # The static reader (a package's __init__ and a module), the audit's scan and importlib's
    # `import_module(".x", package)` in a lazy __getattr__ all resolve through resolve_relative.
    from vllm_shim_patch.analysis.calls import scan_uses

    root = write_tree(tmp_path, {
        "vllm/__init__.py": b"",
        "vllm/a/__init__.py": b"from .x import f\nfrom ..b import g\n",
        "vllm/a/x.py": b"def f(p):\n    pass\n",
        "vllm/b.py": b"import importlib\ndef g(q):\n    pass\n"
                     b"def __getattr__(name):\n    return getattr(importlib.import_module('.a.x', 'vllm'), name)\n",
        "vllm/c.py": b"from ... import nothing\n",
    })
    static = StaticSignatures(root)
    assert static.get("vllm.a.f").origin == "vllm/a/x.py:1"
    assert static.get("vllm.a.g").origin == "vllm/b.py:2"
    assert static.get("vllm.b.f").origin == "vllm/a/x.py:1"  # through the lazy export
    assert static.get("vllm.c.nothing") is None
    assert static.unknown_reason("vllm.c.nothing") == "relative import beyond the top package in vllm/c.py"
    uses = scan_uses(b"from .sub import helper\nfrom vllm.a import f\n", "pkg/mod.py")
    assert [u.callee for u in uses] == ["vllm.a.f"]


@pytest.mark.parametrize(("text", "expected"), [
    ("speculators.gen:Generator.run", ("speculators.gen", ("Generator", "run"))),
    ("speculators.gen:helper", ("speculators.gen", ("helper",))),
    ("speculators.gen", ("speculators.gen", ())),
    ("speculators.gen:", ("speculators.gen", ())),
])
def test_parse_scope(text: str, expected: tuple[str, tuple[str, ...]]) -> None:
    assert parse_scope(text) == expected
    from vllm_shim_patch.rewrite.scoped import Scope

    assert Scope.parse(text) == Scope(*expected)  # the scoped transforms read it the same way


@pytest.mark.parametrize(("annotation", "expected"), [
    ("C", "C"), ("'m.C'", "m.C"), ("Optional[C]", "C"), ("C | None", "C"), ("list[C]", None), ("A | B", None),
])
def test_unwrap_annotation(annotation: str, expected: str | None) -> None:
    found = unwrap_annotation(ast.parse(annotation, mode="eval").body)
    assert (ast.unparse(found) if found is not None else None) == expected

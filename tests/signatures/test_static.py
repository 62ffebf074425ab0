"""StaticSignatures on the fixture tree: what it resolves, what it refuses to guess, and how."""

from __future__ import annotations

import shutil
import zipfile
from pathlib import Path

import pytest
from sigcases import BOUND, BOUND_UNKNOWN, EXISTS, RESOLVED, TREE, UNKNOWN, render

from vllm_shim_patch.errors import SignatureError
from vllm_shim_patch.signatures import Param, Signature, StaticSignatures
from vllm_shim_patch.signatures.model import Presence


@pytest.fixture(scope="module")
def static() -> StaticSignatures:
    return StaticSignatures(TREE)


@pytest.mark.parametrize(("qualname", "expected"), RESOLVED, ids=[q for q, _ in RESOLVED])
def test_static_resolves(static: StaticSignatures, qualname: str, expected: str) -> None:
    sig = static.get(qualname)
    assert sig is not None, static.unknown_reason(qualname)
    assert sig.qualname == qualname
    assert render(sig) == expected


@pytest.mark.parametrize(("qualname", "reason"), UNKNOWN, ids=[q for q, _ in UNKNOWN])
def test_static_unknown(static: StaticSignatures, qualname: str, reason: str) -> None:
    assert static.get(qualname) is None
    assert reason in (static.unknown_reason(qualname) or "")


@pytest.mark.parametrize(("qualname", "expected"), BOUND, ids=[q for q, _ in BOUND])
def test_static_bound_methods(static: StaticSignatures, qualname: str, expected: str) -> None:
    sig = static.get_bound(qualname)
    assert sig is not None, static.bound_unknown_reason(qualname)
    assert render(sig) == expected


@pytest.mark.parametrize(("qualname", "reason"), BOUND_UNKNOWN, ids=[q for q, _ in BOUND_UNKNOWN])
def test_static_bound_unknown(qualname: str, reason: str) -> None:
    fresh = StaticSignatures(TREE)
    assert fresh.get_bound(qualname) is None
    assert reason in (fresh.bound_unknown_reason(qualname) or "")
    assert fresh.unknown_reason(qualname) is None  # the two kinds of answer are kept apart


@pytest.fixture(scope="module")
def decided(tmp_path_factory: pytest.TempPathFactory) -> StaticSignatures:
    """TREE with a dist-info RECORD that lists compiled modules: what a wheel's files carry."""
    root = tmp_path_factory.mktemp("decided") / "tree"
    shutil.copytree(TREE, root)
    (root / "vllm-0.0.0.dist-info").mkdir()
    (root / "vllm-0.0.0.dist-info" / "RECORD").write_text("vllm/_C.abi3.so,,\n")
    return StaticSignatures(root)


@pytest.mark.parametrize(("qualname", "on_instance", "declared", "expected", "reason"), EXISTS,
                         ids=[f"{q}-{int(i)}{int(d)}" for q, i, d, _, _ in EXISTS])
def test_static_exists(decided: StaticSignatures, qualname: str, on_instance: bool, declared: bool,
                       expected: bool | None, reason: str) -> None:
    found = decided.members.exists(qualname, on_instance, declared)
    assert found.found is expected, found
    assert found.kind is {True: Presence.PRESENT, False: Presence.MISSING, None: Presence.UNKNOWN}[expected]
    assert found.name == qualname
    if expected:
        assert found.reason == ""
    else:
        assert reason in found.reason, found.reason


def test_static_params_and_origin(static: StaticSignatures) -> None:
    sig = static.get("vllm.funcs.posonly")
    assert sig == Signature(
        "vllm.funcs.posonly",
        (
            Param("a", "positional_only", True),
            Param("b", "positional_only", True),
            Param("c", "positional_or_keyword", True),
            Param("args", "var_positional", False),
            Param("d", "keyword_only", True),
            Param("kwargs", "var_keyword", False),
        ),
        "vllm/funcs.py:10",
    )
    assert static.get("vllm.reexport.Thing").origin == "vllm/reexport/impl.py:2"  # its __init__
    assert static.get("vllm.dc.Point").origin == "vllm/dc.py:8"  # generated: the class line
    assert static.get("vllm.classes.Child").origin == static.get("vllm.classes.Base").origin


def test_static_parses_only_what_a_lookup_needs() -> None:
    fresh = StaticSignatures(TREE)
    fresh.get("vllm.dc.Point3")
    assert fresh.parsed_modules == ["vllm.dc"]
    fresh.get_many(["vllm.reexport.Thing", "vllm.reexport.Alias"])
    # The star import after `Thing`'s import might rebind it, so its source is read too.
    assert fresh.parsed_modules == [
        "vllm.dc",
        "vllm.reexport",
        "vllm.reexport.impl",
        "vllm.reexport.star_src",
    ]


def test_static_reads_a_wheel(tmp_path: Path, static: StaticSignatures) -> None:
    wheel = tmp_path / "vllm-0.0.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for path in sorted(TREE.rglob("*.py")):
            zf.write(path, path.relative_to(TREE).as_posix())
    from_wheel = StaticSignatures(wheel)
    names = [q for q, _ in RESOLVED] + [q for q, _ in UNKNOWN]
    assert {n: render(s) for n, s in from_wheel.get_many(names).items()} == {
        n: render(static.get(n)) for n in names
    }


def test_static_errors(tmp_path: Path) -> None:
    with pytest.raises(SignatureError, match=r"^no vllm package under "):
        StaticSignatures(tmp_path)
    with pytest.raises(SignatureError, match=r"not vllm/ itself"):
        StaticSignatures(TREE / "vllm")
    with pytest.raises(SignatureError, match=r"does not exist"):
        StaticSignatures(tmp_path / "missing")
    bad = tmp_path / "broken.whl"
    bad.write_bytes(b"not a zip")
    with pytest.raises(SignatureError, match=r"^cannot read "):
        StaticSignatures(bad)


def test_static_relocations(static: StaticSignatures, tmp_path: Path) -> None:
    # Where a missing import's name lives now (the audit's `moved_to`): the public modules that
    # define it at top level, not those that re-export it.
    members = static.members
    assert members.relocations("Thing") == ["vllm.reexport.impl"]
    assert members.relocations("plain") == ["vllm.funcs"]
    assert members.relocations("Base") == ["vllm.classes"]
    assert members.relocations("no_such_name") == [] and members.relocations("not a name") == []
    # Nested definitions are not importable names.
    assert members.relocations("Inner") == []
    wheel = tmp_path / "vllm-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("vllm/__init__.py", "")
        zf.writestr("vllm/_private/mod.py", "def moved(x):\n    pass\n")
        zf.writestr("vllm/public/mod.py", "async def moved(x):\n    pass\n")
        zf.writestr("vllm/public/other.py", "moved = 1  # a top-level assignment defines it too\n")
        zf.writestr("vllm/public/nested.py", "class A:\n    def moved(self):\n        pass\n")
    with StaticSignatures(wheel) as from_wheel:
        # A private module is no place to import from; shortest first.
        assert from_wheel.members.relocations("moved") == ["vllm.public.mod", "vllm.public.other"]
        assert from_wheel.members.relocations("moved", limit=1) == ["vllm.public.mod"]
    assert from_wheel.names.source.closed


@pytest.mark.parametrize(
    ("qualname", "expected", "reason"),
    [
        ("vllm.enums.get_worker", "vllm.enums.Worker", ""),
        ("vllm.enums.get_worker_quoted", "vllm.enums.Worker", ""),
        ("vllm.enums.Factory.make", "vllm.enums.Fields", ""),
        ("vllm.enums.Worker", "vllm.enums.Worker", ""),
        ("vllm.reexport.Thing", "vllm.reexport.impl.Thing", ""),  # where it is defined
        ("vllm.enums.get_maybe", None, "vllm.enums.get_maybe returns Worker | None, not one class"),
        ("vllm.enums.get_nothing", None, "vllm.enums.get_nothing has no return annotation"),
        ("vllm.funcs.plain", None, "vllm.funcs.plain has no return annotation"),
        ("vllm.enums.nowhere", None, "vllm/enums.py does not define 'nowhere'"),
    ],
)
def test_static_returns(static: StaticSignatures, qualname: str, expected: str | None, reason: str) -> None:
    assert static.returns(qualname) == expected
    assert (static.returns_reason(qualname) or "") == reason



@pytest.mark.parametrize("enabled", [True, False])
def test_reading_a_module_leaves_the_cycle_collector_as_it_was(tmp_path: Path, enabled: bool) -> None:
    import gc

    from conftest import write_tree

    root = write_tree(tmp_path, {"vllm/__init__.py": b"", "vllm/ok.py": b"def f(a, *, b=1):\n    pass\n",
                                 "vllm/bad.py": b"def f(:\n"})
    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        src = StaticSignatures(root)
        assert render(src.get("vllm.ok.f")) == "a, *, b="
        assert gc.isenabled() is enabled
        assert src.get("vllm.bad.f") is None
        assert src.unknown_reason("vllm.bad.f").startswith("cannot parse vllm/bad.py: ")
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()


def test_a_batch_leaves_the_cycle_collector_as_it_was() -> None:
    import gc

    was = gc.isenabled()
    try:
        for enabled in (True, False):
            (gc.enable if enabled else gc.disable)()
            src = StaticSignatures(TREE)
            assert {k: render(v) for k, v in src.get_many([RESOLVED[0][0]]).items()} == {RESOLVED[0][0]: RESOLVED[0][1]}
            assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()

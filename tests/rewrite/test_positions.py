"""rewrite/positions.py: libcst's PositionProvider map, node for node, and the module's code."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import libcst as cst
import pytest
from libcst.metadata import CodePosition, CodeRange, MetadataWrapper, PositionProvider

from vllm_shim_patch.rewrite.positions import _KEEP, LazyPositions, code, positions

SOURCES = {
    "plain": "import a\n\n\ndef f(x, *, y=1):\n    return g(\n        x,\n    )[0]\n",
    "no trailing newline": "x = f(1)\nif x:\n    y = (\n        2)",
    "one name, no newline": "x",
    "empty": "",
    "only a newline": "\n",
    "crlf": "x = 1\r\ny = f(\r\n  a)\r\n",
    "cr alone": "x = 1\ry = f(\r  a)\r",
    "crlf without trailing newline": "if x:\r\n    pass",
    "tabs, comments, decorators": "@d(1)\n# c\nclass C(B):\n\tdef m(self):  # x\n\t\treturn [i for i in s if i]\n",
    "string with newlines": 'x = """a\r\n\rb"""\ny = f"{z!r:>{w}}"\n',
    "parenthesized call, semicolons": "x = (\n    f(a)\n); y = 2; z = lambda: (yield)\n",
}


def _assert_same(module: cst.Module) -> None:
    expected = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    got = positions(module)
    assert dict(got) == dict(expected)
    assert got.code == module.code


@pytest.mark.parametrize("source", SOURCES.values(), ids=SOURCES.keys())
def test_same_map_as_libcst(source: str) -> None:
    _assert_same(cst.parse_module(source))


def test_same_map_as_libcst_on_the_engine() -> None:
    """Larger real modules: the engine's own source."""
    for path in sorted((Path(__file__).parents[2] / "src" / "vllm_shim_patch" / "rewrite").glob("*.py"))[:6]:
        _assert_same(cst.parse_module(path.read_bytes()))


def test_a_built_module_is_mapped_too() -> None:
    """A module the call pass made (nodes of its own, never parsed) is mapped like a parsed one."""
    module = cst.parse_module("x = f(a)\n").visit(_AddArg())
    _assert_same(module)


class _AddArg(cst.CSTTransformer):
    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.Call:
        return updated_node.with_changes(args=[*updated_node.args, cst.Arg(cst.Name("b"), keyword=cst.Name("k"))])


def test_lazy_positions_are_made_on_first_use_only() -> None:
    module = cst.parse_module("x = f(1)\n")
    lazy = LazyPositions(module)
    assert PositionProvider in lazy and lazy.found is None
    call = module.body[0].body[0].value  # type: ignore[attr-defined]
    assert lazy[PositionProvider][call] == CodeRange(CodePosition(1, 4), CodePosition(1, 8))
    assert lazy.found is not None and lazy.found.code == "x = f(1)\n"
    with pytest.raises(KeyError):
        lazy[object]  # noqa: B018


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[cst.Module]:
    """Every module whose code is generated from now on (positions' and `Module.code` alike)."""
    made: list[cst.Module] = []
    real = cst.Module._codegen

    def counted(self: cst.Module, state: Any) -> None:
        made.append(self)
        real(self, state)

    monkeypatch.setattr(cst.Module, "_codegen", counted)
    return made


def test_a_module_s_code_is_generated_once_for_its_positions_and_its_code(monkeypatch: pytest.MonkeyPatch) -> None:
    made = _counting(monkeypatch)
    module = cst.parse_module("x = f(1)\n")
    assert code(module) == "x = f(1)\n"
    assert code(module) == "x = f(1)\n" and [id(m) for m in made] == [id(module)]  # the code alone, kept
    found = positions(module)  # the code alone has no positions: generated once more, then kept
    assert positions(module) is found and code(module) == found.code == "x = f(1)\n"
    assert [id(m) for m in made] == [id(module), id(module)]


def test_a_changed_module_is_never_served_the_code_of_the_one_it_came_from(monkeypatch: pytest.MonkeyPatch) -> None:
    """The keys are the modules themselves: a module made from another (a transform's result, equal
    in all but one name) gets its own code and positions, and so does one parsed anew from the
    same text (equal, not the same)."""
    made = _counting(monkeypatch)
    module = cst.parse_module("x = f(1)\n")
    old = positions(module)
    changed = module.visit(_AddArg())
    assert positions(changed).code == code(changed) == "x = f(1, k = b)\n"
    call = changed.body[0].body[0].value  # type: ignore[attr-defined]
    assert positions(changed)[call] == CodeRange(CodePosition(1, 4), CodePosition(1, 15))
    again = cst.parse_module("x = f(1)\n")
    assert again.deep_equals(module) and positions(again) is not old and positions(again).code == old.code
    assert [id(m) for m in made] == [id(module), id(changed), id(again)]


def test_no_module_is_served_the_code_of_one_gone_before_it() -> None:
    """A module is held while it is a key, so a new module can never take a dropped one's identity
    and its code (a module's code alone, unlike its positions, holds no node of it): modules made
    and dropped one after another, more than the cache keeps, each get their own code."""
    import gc

    for i in range(3 * _KEEP):
        module = cst.parse_module(f"x = {i}\n")
        assert code(module) == f"x = {i}\n"
        del module
        gc.collect()

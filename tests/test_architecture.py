"""The package's shape: no import circles, nothing imports the CLI, the bottom imports nothing of ours.

The graph is read from the source with `ast`: every import statement, at module level, in a
function (a lazy import is still an edge) or under `if TYPE_CHECKING:` (a type a module needs
is a dependency too).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import vllm_shim_patch

PKG = Path(vllm_shim_patch.__file__).parent
NAME = "vllm_shim_patch"


def _module_name(path: Path) -> str:
    parts = [NAME, *path.relative_to(PKG).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in PKG.rglob("*.py") if "_remote" not in p.parts}


class _Imports(ast.NodeVisitor):
    def __init__(self, module: str, is_package: bool, known: set[str]):
        self.package = module if is_package else module.rpartition(".")[0]
        self.known = known
        self.found: set[str] = set()

    def _add(self, name: str) -> None:
        # `from pkg import mod` names a module; `from mod import func` names the module itself.
        while name and name not in self.known:
            name = name.rpartition(".")[0]
        if name:
            self.found.add(name)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name.startswith(NAME):
                self._add(alias.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            base = self.package.split(".")
            base = base[: len(base) - node.level + 1]
            module = ".".join(base + ([node.module] if node.module else []))
        else:
            module = node.module or ""
        if not module.startswith(NAME):
            return
        for alias in node.names:
            candidate = f"{module}.{alias.name}"
            self._add(candidate if candidate in self.known else module)


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    graph = {}
    for name, path in modules.items():
        visitor = _Imports(name, path.name == "__init__.py", known)
        visitor.visit(ast.parse(path.read_text()))
        graph[name] = visitor.found - {name}
    for name in list(graph):
        # Importing a.b.c runs a/__init__ and a/b/__init__ first: those are edges too.
        parts = name.split(".")
        for n in range(2, len(parts)):
            parent = ".".join(parts[:n])
            if parent in graph:
                # Not for importers inside that package: its __init__ is already running then.
                for importer, deps in graph.items():
                    if name in deps and not importer.startswith(parent + "."):
                        deps.add(parent)
    return {name: deps - {name} for name, deps in graph.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_the_graph_is_read() -> None:
    graph = import_graph()
    # A few edges that must be there: the test would pass vacuously if none were found.
    assert f"{NAME}.rewrite.engine" in graph[f"{NAME}.rewrite.plan"]
    assert f"{NAME}.rewrite.ops" in graph[f"{NAME}.rules.loader"]
    assert f"{NAME}.commands.context" in graph[f"{NAME}.commands.apply"]
    assert f"{NAME}.settings" in graph[f"{NAME}.cli"]


def test_no_import_cycle() -> None:
    assert _cycle(import_graph()) is None


@pytest.mark.parametrize(
    ("graph", "cycle"),
    [({"a": {"b"}, "b": {"a"}}, ["a", "b", "a"]), ({"a": {"b"}, "b": {"c"}, "c": set()}, None)],
    ids=["cycle", "chain"],
)
def test_cycle_finder(graph: dict[str, set[str]], cycle: list[str] | None) -> None:
    assert _cycle(graph) == cycle


def test_only_main_imports_the_cli() -> None:
    importers = sorted(m for m, deps in import_graph().items() if f"{NAME}.cli" in deps)
    assert importers == [f"{NAME}.__main__"]


def test_the_bottom_imports_nothing_of_ours() -> None:
    graph = import_graph()
    assert graph[f"{NAME}.settings"] == set()
    assert graph[f"{NAME}.errors"] == set()

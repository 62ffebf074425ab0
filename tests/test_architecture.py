"""The package's shape: the layers of ARCHITECTURE.md, each importing only from the layers below;
no import circles; nothing imports the CLI; the bottom imports nothing of ours.

The graph is read from the source with `ast`: every import statement, at module level, in a
function (a lazy import is still an edge) or under `if TYPE_CHECKING:` (a type a module needs
is a dependency too).
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

import vllm_shim_patch

PKG = Path(vllm_shim_patch.__file__).parent
NAME = "vllm_shim_patch"


def _module_name(path: Path) -> str:
    parts = [NAME, *path.relative_to(PKG).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules(remote: bool = False) -> dict[str, Path]:
    """The tool's modules; `remote`: also those that run in the target (`_remote`, a layer apart)."""
    return {_module_name(p): p for p in PKG.rglob("*.py") if remote or "_remote" not in p.parts}


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


def import_graph(remote: bool = False) -> dict[str, set[str]]:
    """The graph, read once per run (a copy each call: a test may not change another's)."""
    return {name: set(deps) for name, deps in _read_graph(remote).items()}


@functools.cache
def _read_graph(remote: bool) -> dict[str, set[str]]:
    modules = _modules(remote)
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


# ARCHITECTURE.md's layers, top first: a module belongs to the first layer with a prefix naming it
# (the module itself or a package above it). A module may import its own layer and any below.
LAYERS: list[tuple[str, ...]] = [
    ("__main__",),
    ("cli",),
    ("commands",),
    ("report",),
    ("analysis",),
    ("overlay",),
    ("fleet",),  # the patched wheel: overlay/ recognises an install from one
    ("rules",),  # the loader asks the operations in rewrite/ops to parse their keys
    ("rewrite",),  # rewrite/rule.py: the frozen Rule the engine compiles
    ("signatures",),
    ("target",),
    ("settings", "options", "kinds", "errors", "fsutil", "faults", "interrupts", "versions", "words", "vllm_source", ""),
]


def rank(module: str) -> int:
    """The layer of `module`, counted from the bottom (0)."""
    name = module.removeprefix(NAME).removeprefix(".")
    for n, prefixes in enumerate(LAYERS):
        if any(name == p or (p and name.startswith(p + ".")) for p in prefixes):
            return len(LAYERS) - 1 - n
    raise AssertionError(f"{module} is in no layer of ARCHITECTURE.md: add it to LAYERS and the doc")


def upward(graph: dict[str, set[str]]) -> list[str]:
    """Every import of a module from a higher layer than the importer's."""
    return sorted(f"{m} (layer {rank(m)}) imports {d} (layer {rank(d)})"
                  for m, deps in graph.items() for d in deps if rank(d) > rank(m))


def test_every_module_has_a_layer() -> None:
    for module in import_graph():
        rank(module)


def _documented() -> list[str]:
    """The modules ARCHITECTURE.md's layer diagram names in its first column, top first."""
    doc = (Path(__file__).parents[1] / "ARCHITECTURE.md").read_text()
    block = doc.split("## Layers", 1)[1].split("```")[1]
    names = []
    for row in block.splitlines():
        if row[:1].strip():  # an indented row continues the one above
            for word in row[:23].split():
                names.append(word.removesuffix("/").removesuffix(".py").replace("/", "."))
    return [n for n in names if n != "_remote"]  # runs in the target: not in the graph


def test_the_doc_lists_the_layers_in_order() -> None:
    names = _documented()
    # Not in the diagram: the package's __init__ (nothing but its version), __main__.
    assert sorted(names) == sorted(p for layer in LAYERS for p in layer if p not in ("", "__main__"))
    ranks = [rank(f"{NAME}.{n}") for n in names]
    assert ranks == sorted(ranks, reverse=True), list(zip(names, ranks))


def test_each_layer_imports_only_from_below() -> None:
    assert upward(import_graph()) == []


@pytest.mark.parametrize(
    ("importer", "imported", "upward_"),
    [
        (f"{NAME}.overlay.baseline", f"{NAME}.report.audit", True),
        (f"{NAME}.rewrite.plan", f"{NAME}.rules.loader", True),
        (f"{NAME}.rewrite.plan", f"{NAME}.rules", True),
        (f"{NAME}.rewrite.plan", f"{NAME}.rewrite.rule", False),
        (f"{NAME}.rules.loader", f"{NAME}.rewrite.ops", False),
        (f"{NAME}.analysis.verify", f"{NAME}.words", False),
        (f"{NAME}.commands.apply", f"{NAME}.commands.context", False),
    ],
    ids=["overlay-to-report", "engine-to-loader", "engine-to-rules", "engine-to-model", "loader-to-ops", "to-bottom",
         "same-layer"],
)
def test_upward_finder(importer: str, imported: str, upward_: bool) -> None:
    assert bool(upward({importer: {imported}})) is upward_


def test_the_graph_is_read() -> None:
    graph = import_graph()
    # A few edges that must be there: the test would pass vacuously if none were found.
    assert f"{NAME}.rewrite.engine" in graph[f"{NAME}.rewrite.plan"]
    assert f"{NAME}.rewrite.ops" in graph[f"{NAME}.rules.loader"]
    assert f"{NAME}.commands.context" in graph[f"{NAME}.commands.apply"]
    assert f"{NAME}.settings" in graph[f"{NAME}.cli"]


def folders() -> list[str]:
    """Every package of ours but the top one: each folder, nested ones included."""
    return sorted(m for m, path in _modules().items() if path.name == "__init__.py" and m != NAME)


def layers_of(folder: str, graph: dict[str, set[str]]) -> list[int]:
    """The layers the modules of `folder` (its own __init__ and everything under it) are in."""
    return sorted({rank(m) for m in graph if m == folder or m.startswith(folder + ".")})


def test_every_folder_is_one_layer() -> None:
    # A folder split across layers (its loader above rewrite/, its model below) lets an arrow run
    # back up between folders while every module still imports only from below.
    graph = import_graph()
    assert folders(), "no folder found"
    assert {f: layers_of(f, graph) for f in folders() if len(layers_of(f, graph)) != 1} == {}


def room(module: str) -> str:
    """What `module` is at the top of the package: its top folder, or the module itself (a room,
    as farm-studio draws the package)."""
    return ".".join(module.split(".")[:2])


def rooms(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The import graph between rooms (the imports inside one room left out)."""
    out: dict[str, set[str]] = {}
    for module, deps in graph.items():
        out.setdefault(room(module), set()).update(room(d) for d in deps if room(d) != room(module))
    return out


def test_no_arrow_runs_back_up_between_folders() -> None:
    graph = rooms(import_graph())
    assert f"{NAME}.rewrite" in graph[f"{NAME}.rules"]  # read: the loader compiles with the operations
    assert _cycle(graph) is None


@pytest.mark.parametrize(
    ("graph", "cycle"),
    [
        # The shape this test was written against: rules/ both above rewrite/ and below it.
        ({f"{NAME}.rules.loader": {f"{NAME}.rewrite.ops"}, f"{NAME}.rewrite.ops": {f"{NAME}.rules.model"},
          f"{NAME}.rules.model": set()}, [f"{NAME}.rewrite", f"{NAME}.rules", f"{NAME}.rewrite"]),
        ({f"{NAME}.rules.loader": {f"{NAME}.rewrite.ops"}, f"{NAME}.rewrite.ops": {f"{NAME}.rewrite.rule"},
          f"{NAME}.rewrite.rule": set()}, None),
    ],
    ids=["folder-spans-two-layers", "one-layer-each"],
)
def test_room_cycle_finder(graph: dict[str, set[str]], cycle: list[str] | None) -> None:
    assert _cycle(rooms(graph)) == cycle


def test_a_folder_split_across_layers_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    # The layers as they were: rules.loader above rewrite/, rules.model below it.
    split = [layer for layer in LAYERS if layer != ("rules",)]
    split.insert(split.index(("rewrite",)), ("rules.loader", "rules.testing"))
    split.insert(split.index(("rewrite",)) + 1, ("rules.model", "rules"))
    monkeypatch.setattr(f"{__name__}.LAYERS", split)
    graph = {f"{NAME}.rules": set(), f"{NAME}.rules.loader": set(), f"{NAME}.rules.model": set()}
    assert len(layers_of(f"{NAME}.rules", graph)) == 2


def test_no_import_cycle() -> None:
    assert _cycle(import_graph()) is None


def test_no_import_cycle_in_what_runs_in_the_target() -> None:
    assert _cycle(import_graph(remote=True)) is None


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
    assert graph[f"{NAME}.kinds"] == set()
    assert graph[f"{NAME}.settings"] == {f"{NAME}.kinds"}  # RuleOption: the opt-ins a setting gives
    assert graph[f"{NAME}.options"] == {f"{NAME}.settings"}  # CommandOptions, option()
    assert graph[f"{NAME}.errors"] == set()
    assert graph[f"{NAME}.words"] == set()
    assert graph[f"{NAME}.vllm_source"] == set()


def test_pyproject_lists_every_package() -> None:
    """setuptools is given the package list by hand (rules/ and codemods/ are mapped in): a
    package left off it is missing from the wheel, so a non-editable install fails to import it."""
    text = (PKG.parents[1] / "pyproject.toml").read_text()
    listed = text.split("\npackages = [\n", 1)[1].split("\n]", 1)[0]
    names = {line.strip().strip('",') for line in listed.splitlines() if line.strip()}
    tree = {_module_name(p.parent / "__init__.py") for p in PKG.rglob("__init__.py")}
    assert tree - names == set()
    assert names - tree == {f"{NAME}.bundled_rules", f"{NAME}.codemods"}


RELEASES = f"{NAME}._remote.rehearse.releases"


def _adapters() -> list[str]:
    """The release adapters: the names in releases/__init__.py's ADAPTERS tuple, read from its source."""
    tree = ast.parse((PKG / "_remote" / "rehearse" / "releases" / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "ADAPTERS" for t in node.targets):
            assert isinstance(node.value, ast.Tuple)
            return [f"{RELEASES}.{elt.id}" for elt in node.value.elts if isinstance(elt, ast.Name)]
    raise AssertionError("releases/__init__.py defines no ADAPTERS tuple")


def _owner(module: str, adapters: list[str]) -> str | None:
    return next((a for a in adapters if module == a or module.startswith(a + ".")), None)


def sibling_imports(graph: dict[str, set[str]], adapters: list[str]) -> list[str]:
    """Every import, by a module of one adapter or of a package the adapters share, of another
    adapter's module (an adapter imports only its own modules and the shared packages)."""
    found = []
    for module, deps in graph.items():
        if not module.startswith(RELEASES + ".") or module == RELEASES:
            continue
        mine = _owner(module, adapters)
        found += [f"{module} imports {dep}" for dep in sorted(deps)
                  if (theirs := _owner(dep, adapters)) is not None and theirs != mine]
    return sorted(found)


def test_no_release_adapter_imports_another() -> None:
    adapters = _adapters()
    assert len(adapters) >= 2
    assert sibling_imports(import_graph(remote=True), adapters) == []


@pytest.mark.parametrize(
    ("importer", "imported", "found"),
    [("v1_tp.rankworker", "v1_multiproc", True), ("v1_tp", "v1_multiproc.runner", True),
     ("shared", "v1_tp.ranks", True), ("v1_tp.rankworker", "shared.worker", False),
     ("v1_tp.rankworker", "v1_tp.ranks", False)],
    ids=["adapter-module", "adapter-package", "shared-package", "shared", "own"],
)
def test_sibling_import_finder(importer: str, imported: str, found: bool) -> None:
    adapters = [f"{RELEASES}.v1_multiproc", f"{RELEASES}.v1_tp"]
    graph = {f"{RELEASES}.{importer}": {f"{RELEASES}.{imported}"}}
    assert sibling_imports(graph, adapters) == ([f"{RELEASES}.{importer} imports {RELEASES}.{imported}"]
                                                if found else [])


def command_modules() -> set[str]:
    """The modules of `commands/` holding an entry point of the command table (a command's function
    or one of its modes): read from the table itself, so a new command is held too."""
    from vllm_shim_patch.commands import COMMANDS

    return {f"{NAME}.commands.{module}" for entry in COMMANDS
            for module, _ in [entry.where, *(function.split(":") for _, function in entry.modes)]}


def command_imports(graph: dict[str, set[str]], commands: set[str]) -> list[str]:
    """Every import of a command module by another: a command calling a command makes `commands/`
    as deep as the longest such chain; the steps they share live in modules that are no command."""
    return sorted(f"{m} imports {d}" for m in sorted(commands) for d in sorted(graph.get(m, ())) if d in commands - {m})


def test_no_command_imports_another() -> None:
    commands = command_modules()
    # The table names these, among others: the reading is not empty.
    assert {f"{NAME}.commands.{m}" for m in ("apply", "check", "diff", "wheel", "rollback")} <= commands
    assert f"{NAME}.commands.patch" not in commands and f"{NAME}.commands.patched_wheel" not in commands
    assert command_imports(import_graph(), commands) == []


@pytest.mark.parametrize(
    ("graph", "found"),
    [({"c.wheel": {"c.apply", "c.context"}}, ["c.wheel imports c.apply"]),
     ({"c.wheel": {"c.patch", "c.context"}, "c.apply": {"c.patch"}}, []),
     ({"c.apply": {"c.apply"}}, [])],
    ids=["command-to-command", "shared-step", "itself"],
)
def test_command_import_finder(graph: dict[str, set[str]], found: list[str]) -> None:
    assert command_imports(graph, {"c.wheel", "c.apply"}) == found

"""Qualified names of callees from a module's imports, where libcst's scope analysis is not needed.

libcst's `QualifiedNameProvider` builds every scope of the module, then names every node in it:
most of a dry run's time on speculators' generator module. The engine only asks it about calls,
and only cares whether a call's name comes from an import of a rule's package. Where that name's
head (`Scheduler`, `vllm` in `vllm.config.CacheConfig`) is bound once in the whole file, by an
import at module level, and no call with that head comes before the import at module level
(libcst then leaves it unresolved), the provider's answer for every call with that head is
that import's, which `ImportNames` computes the way libcst does (`ImportAssignment`). Anything
else (a name bound twice, in a function, a star import, a file `ast` cannot read) returns None
from `import_names`, and the engine asks the provider as before.
"""

from __future__ import annotations

import ast
import warnings
from collections.abc import Collection
from dataclasses import dataclass

import libcst as cst
from libcst.helpers import get_full_name_for_node
from libcst.metadata import QualifiedName, QualifiedNameSource


@dataclass(frozen=True)
class _Import:
    """One import statement as libcst's `ImportAssignment` reads it."""

    module: str  # `from MODULE import ...` with its leading dots; "" for `import ...`
    names: tuple[tuple[str, str | None], ...]  # (dotted name, as-name) of every alias
    end: tuple[int, int]  # where the statement ends (line, column)

    def qualified_names(self, full_name: str) -> set[QualifiedName]:
        """libcst's `ImportAssignment.get_qualified_names_for`, on the same data."""
        results = set()
        for dotted, alias in self.names:
            parts = dotted.split(".")
            for real_name in (".".join(parts[:i]) for i in range(len(parts), 0, -1)):
                as_name = real_name
                if self.module.endswith("."):
                    real_name = f"{self.module}{real_name}"
                elif self.module:
                    real_name = f"{self.module}.{real_name}"
                if alias is not None:
                    as_name = alias
                if full_name.startswith(as_name):
                    remaining = full_name.split(as_name, 1)[1]
                    if remaining and not remaining.startswith("."):
                        continue
                    remaining = remaining.lstrip(".")
                    results.add(QualifiedName(f"{real_name}.{remaining}" if remaining else real_name,
                                              QualifiedNameSource.IMPORT))
                    break
        return results


class ImportNames:
    """The answer for each call of a file `import_names` accepted."""

    def __init__(self, imports: dict[str, _Import]):
        self._imports = imports  # head name -> the one import that binds it

    def __call__(self, func: cst.BaseExpression) -> Collection[QualifiedName]:
        """What `QualifiedNameProvider` says about `func` where it can say an import of interest.

        A head no import of a rule's package binds has no such name: the provider's names for it
        are ones no rule matches, which the engine ignores, so none are computed here."""
        full_name = get_full_name_for_node(func)
        if full_name is None:
            return set()
        found = self._imports.get(full_name.split(".", 1)[0])
        return set() if found is None else found.qualified_names(full_name)


def _head(node: ast.AST) -> str | None:
    """The first name of libcst's `get_full_name_for_node` of a callee, read from `ast`."""
    while True:
        if isinstance(node, ast.Name):
            return node.id
        if isinstance(node, ast.Attribute):
            node = node.value
        elif isinstance(node, ast.Call):
            node = node.func
        elif isinstance(node, ast.Subscript):
            node = node.value
        else:
            return None


class _Scan(ast.NodeVisitor):
    """Every binding of every name (a superset of what libcst records), every call's head."""

    def __init__(self) -> None:
        self.depth = 0  # inside a function, lambda or class body
        self.bindings: dict[str, int] = {}
        self.imports: dict[str, list[tuple[_Import, bool]]] = {}  # head -> (import, at module level)
        self.calls: list[tuple[str, bool, tuple[int, int]]] = []  # (head, maybe module scope, start)
        self.star = False
        self.strings: list[str] = []

    def bind(self, name: str | None) -> None:
        if name is not None:
            self.bindings[name] = self.bindings.get(name, 0) + 1

    def _import(self, node: ast.Import | ast.ImportFrom, module: str) -> None:
        found = _Import(module, tuple((a.name, a.asname) for a in node.names),
                        (node.end_lineno or node.lineno, node.end_col_offset or 0))
        for alias in node.names:
            if alias.name == "*":
                self.star = True
                continue
            head = alias.asname or alias.name.split(".", 1)[0]
            self.bind(head)
            self.imports.setdefault(head, []).append((found, self.depth == 0))

    def visit_Import(self, node: ast.Import) -> None:
        self._import(node, "")

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        self._import(node, "." * node.level + (node.module or ""))

    def visit_Name(self, node: ast.Name) -> None:
        if not isinstance(node.ctx, ast.Load):  # Store, and Del (not a binding to libcst: counted anyway)
            self.bind(node.id)

    def visit_arg(self, node: ast.arg) -> None:
        self.bind(node.arg)
        self.generic_visit(node)

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        self.bind(node.name)
        self.generic_visit(node)

    def visit_MatchAs(self, node: ast.MatchAs) -> None:
        self.bind(node.name)
        self.generic_visit(node)

    def visit_MatchStar(self, node: ast.MatchStar) -> None:
        self.bind(node.name)

    def visit_MatchMapping(self, node: ast.MatchMapping) -> None:
        self.bind(node.rest)
        self.generic_visit(node)

    def visit_Global(self, node: ast.Global) -> None:
        for name in node.names:
            self.bind(name)

    visit_Nonlocal = visit_Global  # type: ignore[assignment]

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str):
            self.strings.append(node.value)  # libcst reads string annotations as code

    def visit_Call(self, node: ast.Call) -> None:
        head = _head(node.func)
        if head is not None:
            self.calls.append((head, self.depth == 0, (node.lineno, node.col_offset)))
        self.generic_visit(node)

    def _body(self, body: list[ast.stmt] | ast.expr) -> None:
        self.depth += 1
        for stmt in body if isinstance(body, list) else [body]:
            self.visit(stmt)
        self.depth -= 1

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.bind(node.name)
        for field in ("decorator_list", "type_params"):
            for child in getattr(node, field, ()):
                self.visit(child)
        self.visit(node.args)
        if node.returns is not None:
            self.visit(node.returns)
        self._body(node.body)

    visit_FunctionDef = visit_AsyncFunctionDef = _function

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self.visit(node.args)
        self._body(node.body)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.bind(node.name)
        for field in ("decorator_list", "type_params", "bases", "keywords"):
            for child in getattr(node, field, ()):
                self.visit(child)
        self._body(node.body)

    def generic_visit(self, node: ast.AST) -> None:
        name = getattr(node, "name", None)
        if type(node).__name__ in ("TypeVar", "ParamSpec", "TypeVarTuple") and isinstance(name, str):
            self.bind(name)  # PEP 695 type parameters (3.12)
        super().generic_visit(node)


def import_names(data: bytes, packages: Collection[str]) -> ImportNames | None:
    """The callee names of the module `data` for calls into `packages` (top-level names such as
    `vllm`), or None where only libcst's scope analysis gives its exact answer."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # an invalid escape in the user's file is not ours to report
            tree = ast.parse(data)
    except (SyntaxError, ValueError, UnicodeDecodeError, LookupError, MemoryError, RecursionError):
        return None
    scan = _Scan()
    scan.visit(tree)
    if scan.star:
        return None

    def of_interest(found: _Import) -> bool:
        tops = {found.module.split(".", 1)[0]} if found.module else {n.split(".", 1)[0] for n, _ in found.names}
        return not tops.isdisjoint(packages)

    imports: dict[str, _Import] = {}
    heads = {head for head, _, _ in scan.calls}
    for head in heads:
        bound = scan.imports.get(head, [])
        if not any(of_interest(found) for found, _ in bound):
            continue  # no import of a rule's package binds it: nothing a rule matches
        if scan.bindings.get(head) != 1 or not bound[0][1]:
            return None  # bound twice, or not at module level: a scope decides
        imports[head] = bound[0][0]
    for head, module_level, start in scan.calls:
        if head in imports and module_level and start < imports[head].end:
            return None  # at module level before its import: libcst does not resolve it to it
    if imports and any(head in text for text in scan.strings for head in imports):
        # A string annotation libcst reads as code could bind the name too.
        for text in scan.strings:
            if any(head in text for head in imports) and _binds(text, imports):
                return None
    return ImportNames(imports)


def _binds(text: str, heads: Collection[str]) -> bool:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(text)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return False
    scan = _Scan()
    scan.visit(tree)
    return scan.star or any(head in scan.bindings for head in heads)

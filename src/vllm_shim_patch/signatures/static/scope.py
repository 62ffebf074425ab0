"""The vocabulary every layer of the static reader shares, kept at the bottom so the layers
above depend on it and never on each other's internals: `Unknown`, the records for parsed
modules, classes and functions, and the names a module or class body binds, read off the AST
without executing it (a body's bindings must be known before any name in it can be resolved)."""

from __future__ import annotations

import ast
from dataclasses import dataclass

__all__ = [
    "Binding",
    "Class",
    "Ext",
    "Func",
    "Method",
    "Missing",
    "Module",
    "AttrMro",
    "Mro",
    "Obj",
    "RawParam",
    "Scope",
    "Unknown",
    "Unresolved",
    "dotted",
    "literal",
    "returns_argument",
]

# (name, one of model.PARAM_KINDS, required[, the default as literal source text or None])
RawParam = tuple  # type: ignore[type-arg]


class Unknown(Exception):
    """The source does not decide the signature; the message says why."""


class Missing(Unknown):
    """The source decides that the name does not exist (a module or class that surely lacks it)."""


# Matched by spelling: the scope reader runs before any name can be resolved.
_OVERLOAD_SPELLINGS = ("overload", "typing.overload", "typing_extensions.overload")


@dataclass(eq=False)
class Module:
    name: str
    path: str  # relative to the root, e.g. "vllm/config/__init__.py"
    is_package: bool
    scope: Scope


@dataclass(frozen=True)
class Ext:
    """Something outside the parsed packages, known only by its qualified name."""

    qualname: str


@dataclass(eq=False)
class Func:
    module: Module
    node: ast.FunctionDef | ast.AsyncFunctionDef


@dataclass(eq=False)
class Class:
    module: Module
    node: ast.ClassDef
    scope: Scope

    @property
    def label(self) -> str:
        return f"{self.module.name}.{self.node.name}"

    @property
    def origin(self) -> str:
        return f"{self.module.path}:{self.node.lineno}"


@dataclass(eq=False)
class Method(Func):
    """A def found as a class attribute (keeps self unless it is a classmethod)."""


Obj = Module | Ext | Func | Class
Mro = list[Class | str]  # str: the qualname of a known external base


@dataclass(frozen=True)
class Unresolved:
    """A base the source does not resolve to a class, in an MRO read for attributes: why."""

    reason: str


# The MRO as attribute lookup walks it: any external base (its qualname), and bases not known.
AttrMro = list["Class | str | Unresolved"]


@dataclass(frozen=True)
class Binding:
    kind: str  # "import" | "from" | "def" | "assign" | "other"
    node: ast.AST
    stmt: ast.AST | None = None
    line: int = 0


@dataclass(eq=False)
class Scope:
    """The names a module or class body binds, read without executing it."""

    bindings: dict[str, list[Binding]]
    overloads: set[str]
    star_imports: list[ast.ImportFrom]
    nested_annotations: bool  # an annotated name inside if/try/with/for: fields are not static

    @classmethod
    def read(cls, body: list[ast.stmt]) -> Scope:
        scope = cls({}, set(), [], False)
        scope._walk(body, nested=False)
        return scope

    def _add(
        self, name: str, kind: str, node: ast.AST, line: int, stmt: ast.AST | None = None
    ) -> None:
        self.bindings.setdefault(name, []).append(Binding(kind, node, stmt, line))

    def _walk(self, body: list[ast.stmt], nested: bool) -> None:
        for stmt in body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if any(dotted(d) in _OVERLOAD_SPELLINGS for d in stmt.decorator_list):
                    self.overloads.add(stmt.name)
                else:
                    self._add(stmt.name, "def", stmt, stmt.lineno)
            elif isinstance(stmt, ast.ClassDef):
                self._add(stmt.name, "def", stmt, stmt.lineno)
            elif isinstance(stmt, ast.Import):
                for alias in stmt.names:
                    self._add(
                        alias.asname or alias.name.split(".")[0], "import", alias, stmt.lineno
                    )
            elif isinstance(stmt, ast.ImportFrom):
                for alias in stmt.names:
                    if alias.name == "*":
                        self.star_imports.append(stmt)
                    else:
                        self._add(alias.asname or alias.name, "from", alias, stmt.lineno, stmt)
            elif isinstance(stmt, ast.Assign):
                for target in stmt.targets:
                    for name in _target_names(target):
                        kind = "assign" if isinstance(target, ast.Name) else "other"
                        self._add(name, kind, stmt.value, stmt.lineno)
            elif isinstance(stmt, ast.AnnAssign):
                if nested:
                    self.nested_annotations = True
                if stmt.value is not None and isinstance(stmt.target, ast.Name):
                    self._add(stmt.target.id, "assign", stmt.value, stmt.lineno)
            elif isinstance(stmt, ast.If) and _is_type_checking(stmt.test):
                # Only type checkers see the body; the runtime sees the else branch.
                self._walk(stmt.orelse, nested=True)
            elif isinstance(
                stmt, (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith)
            ):
                if isinstance(stmt, (ast.For, ast.AsyncFor)):
                    for name in _target_names(stmt.target):
                        self._add(name, "other", stmt, stmt.lineno)
                if isinstance(stmt, (ast.With, ast.AsyncWith)):
                    for item in stmt.items:
                        if item.optional_vars is not None:
                            for name in _target_names(item.optional_vars):
                                self._add(name, "other", stmt, stmt.lineno)
                self._walk(stmt.body, nested=True)
                self._walk(getattr(stmt, "orelse", []), nested=True)
            elif isinstance(stmt, ast.Try) or type(stmt).__name__ == "TryStar":
                self._walk(stmt.body, nested=True)  # type: ignore[attr-defined]
                for handler in stmt.handlers:  # type: ignore[attr-defined]
                    if handler.name:
                        self._add(handler.name, "other", handler, handler.lineno)
                    self._walk(handler.body, nested=True)
                self._walk(stmt.orelse, nested=True)  # type: ignore[attr-defined]
                self._walk(stmt.finalbody, nested=True)  # type: ignore[attr-defined]
            elif isinstance(stmt, (ast.AugAssign, ast.Delete)):
                targets = stmt.targets if isinstance(stmt, ast.Delete) else [stmt.target]
                for target in targets:
                    for name in _target_names(target):
                        self._add(name, "other", stmt, stmt.lineno)
            elif type(stmt).__name__ in ("Match", "TypeAlias"):
                for node in ast.walk(stmt):
                    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                        self._add(node.id, "other", stmt, stmt.lineno)
            # Walrus targets at module level are too rare in vLLM to model.


def _target_names(target: ast.expr) -> list[str]:
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [n for elt in target.elts for n in _target_names(elt)]
    if isinstance(target, ast.Starred):
        return _target_names(target.value)
    return []


def _is_type_checking(test: ast.expr) -> bool:
    return dotted(test) in (
        "TYPE_CHECKING",
        "typing.TYPE_CHECKING",
        "typing_extensions.TYPE_CHECKING",
    )


def dotted(expr: ast.AST) -> str | None:
    """`a.b.c` for a Name/Attribute chain (the decorator's function for a call), else None."""
    if isinstance(expr, ast.Call):
        expr = expr.func
    parts = []
    while isinstance(expr, ast.Attribute):
        parts.append(expr.attr)
        expr = expr.value
    if not isinstance(expr, ast.Name):
        return None
    parts.append(expr.id)
    return ".".join(reversed(parts))


def literal(expr: ast.AST | None, what: str) -> object:
    if expr is None:
        return None
    try:
        return ast.literal_eval(expr)
    except (ValueError, TypeError, SyntaxError):
        raise Unknown(f"{what} is not a literal: {ast.unparse(expr)}") from None


_OBJ, _NONE = "the decorated object", "None"


def returns_argument(func: ast.FunctionDef | ast.AsyncFunctionDef, call: ast.Call | None) -> bool:
    """Whether decorating with `func` (bare, or as `func(...)` when `call` is given) hands back
    the decorated object itself: vLLM 0.10-0.15's `@config` (`return cls`), `@bc_linter_include`
    (`return _wrap if obj is None else obj`, `_wrap` returning its argument).

    Read without resolving names: the first parameter is the object (bare) or absent and None
    (`func(reason=...)`, keywords only); the body may hold a docstring, nested defs, `if`s on
    `param is None` and returns, and every return must give back the object, or, when called,
    a nested def that does so. Anything else (an assignment that could touch the object, a
    call, a loop) is no pass-through.
    """
    if isinstance(func, ast.AsyncFunctionDef) or func.decorator_list:
        return False
    args = func.args
    positional = args.posonlyargs + args.args
    if not positional or args.vararg or any(d is None for d in args.kw_defaults):
        return False
    if len(positional) - len(args.defaults) > (0 if call is not None else 1):
        return False  # another required parameter: not a one-argument decorator
    param = positional[0].arg
    if call is not None:
        if call.args or any(kw.arg in (None, param) for kw in call.keywords):
            return False
        first_default = args.defaults[0] if len(args.defaults) == len(positional) else None
        if not (isinstance(first_default, ast.Constant) and first_default.value is None):
            return False
    nested = {n.name: n for n in func.body if isinstance(n, ast.FunctionDef)}
    value = _NONE if call is not None else _OBJ

    def gives_back(expr: ast.expr) -> bool:
        if isinstance(expr, ast.IfExp):
            test = _is_none_test(expr.test, param)
            if test is None:
                return gives_back(expr.body) and gives_back(expr.orelse)
            return gives_back(expr.body if test == (value == _NONE) else expr.orelse)
        if isinstance(expr, ast.Name) and expr.id == param:
            return value == _OBJ
        if isinstance(expr, ast.Name) and expr.id in nested and value == _NONE:
            return returns_argument(nested[expr.id], None)
        return False

    def body_ok(body: list[ast.stmt]) -> bool:
        for i, stmt in enumerate(body):
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
                continue
            if isinstance(stmt, ast.FunctionDef) and stmt.name in nested:
                continue
            if isinstance(stmt, ast.Return):
                return stmt.value is not None and gives_back(stmt.value)
            if isinstance(stmt, ast.If):
                test = _is_none_test(stmt.test, param)
                branches = [stmt.body, stmt.orelse] if test is None else [
                    stmt.body if test == (value == _NONE) else stmt.orelse
                ]
                ends = [b for b in branches if b and isinstance(b[-1], ast.Return)]
                if not all(body_ok(b) for b in branches if b):
                    return False
                if len(ends) == len(branches) and all(branches):
                    return True  # every branch returned
                continue
            return False
        return False  # falls off the end: returns None

    return body_ok(func.body)


def _is_none_test(test: ast.expr, param: str) -> bool | None:
    """`param is None` → True, `param is not None` → False (as "is the parameter None?"), else None."""
    if (
        isinstance(test, ast.Compare)
        and len(test.ops) == 1
        and isinstance(test.left, ast.Name)
        and test.left.id == param
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value is None
    ):
        if isinstance(test.ops[0], ast.Is):
            return True
        if isinstance(test.ops[0], ast.IsNot):
            return False
    return None

"""Transforms of a scoped region of the package: a module, a class or a function.

Some breaks live in no call a qualified name reaches: a method renamed on an untyped `self`, a
protocol (`execute_model` then `sample_tokens`), a return convention. A scoped rule names its
region as `in: package.module:Class.method` and transforms it with a `ScopedTransform`: the
`method` operation is one, and a codemod in `codemods/NAME.py` defines its own (``class
Codemod(ScopedTransform)``). Edits and sites left for a human are recorded with their lines.
"""

from __future__ import annotations

import ast
import contextlib
import difflib
import inspect
import signal
import textwrap
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import libcst as cst
from libcst.metadata import PositionProvider

from ..vllm_source import parse_scope
from . import positions

if TYPE_CHECKING:
    from .rule import Rule


@dataclass(frozen=True)
class Scope:
    """`in: module:Qual.name`: the module, and the path of classes and functions inside it."""

    module: str
    inner: tuple[str, ...]  # () for the whole module

    @classmethod
    def parse(cls, text: str) -> Scope:
        return cls(*parse_scope(text))

    def __str__(self) -> str:
        return self.module + (":" + ".".join(self.inner) if self.inner else "")

    def def_line(self, source: bytes | ast.Module | None) -> int | None:
        """The line of the region's `def`/`class` in `source` (1 for the module), or None.

        `source` may come parsed already (`parse_source`; None: it could not be)."""
        if not self.inner:
            return 1
        tree = parse_source(source) if isinstance(source, bytes) else source
        if tree is None:
            return None
        body: list[ast.stmt] = tree.body
        node: ast.AST | None = None
        for name in self.inner:
            node = next((n for n in body if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                         and n.name == name), None)
            if node is None:
                return None
            body = node.body  # type: ignore[attr-defined]
        return getattr(node, "lineno", None)


def parse_source(source: bytes) -> ast.Module | None:
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError):
        return None


class ScopedTransform(cst.CSTTransformer):
    """A transformer that knows whether it is inside its rule's region.

    Subclasses act only where `self.in_scope` is true, call `self.edited(node, what)` for each
    change and `self.needs_human(node, why)` for each site they leave alone. `self.rule` is the
    rule (its spec through `self.rule.op(...)`); `self.module` the whole module being changed.

    A subclass that needs to see nothing outside its region sets `region_only = True`: its
    visit then enters only the region and what may lead to it (the classes and functions on the
    way, compound statements), and the rest of the module is kept as it is, unvisited (most of
    the cost of a visit). Its `visit_`/`leave_` methods still run on the nodes it does not enter.

    `self.signatures` holds the installed vLLM's signatures the engine read (qualified name ->
    Signature, or None where unknown), the callees of the rule's `guard: accepts` among them: a
    codemod whose edit depends on a signature names its callee there and reads it here.
    `self.version` is the vLLM version the plan is for (None: unknown), for an edit whose form
    differs between releases where no signature can tell.
    """

    METADATA_DEPENDENCIES = (PositionProvider,)
    signatures: Mapping[str, Any] = {}  # set on each instance by the engine
    version: Any = None  # packaging Version, set on each instance by the engine
    codemod_name: str | None = None  # set on a codemod's class when it is loaded
    region_only: bool = False

    def __init__(self, rule: Rule, scope: Scope, module: cst.Module):
        super().__init__()
        self.rule = rule
        self.scope = scope
        self.module = module
        self.found = not scope.inner
        self.edits: list[tuple[int, int, str]] = []
        self.human: list[tuple[int, int, str]] = []
        self.imports_to_drop: list[ImportDrop] = []  # drop_unused_import's, run by the engine
        self.unbound: list[str] = []  # `unbinds`: module-level functions this edit leaves unreachable
        self._stack: list[str] = []
        self._inside = not scope.inner

    @property
    def in_scope(self) -> bool:
        """Inside the region (or anything nested in it)."""
        return self._inside

    @property
    def at_scope(self) -> bool:
        """At the region's own class or function (in `visit_FunctionDef`/`visit_ClassDef`)."""
        return tuple(self._stack) == self.scope.inner

    # Scope tracking in on_visit/on_leave, so a subclass may define visit_FunctionDef freely.
    def on_visit(self, node: cst.CSTNode) -> bool:
        inner = self.scope.inner
        if isinstance(node, (cst.ClassDef, cst.FunctionDef)):
            self._stack.append(node.name.value)
            if tuple(self._stack) == inner:
                self.found = True
            self._inside = tuple(self._stack[: len(inner)]) == inner
        enter = super().on_visit(node)
        if enter and self.region_only and not self._inside:
            if isinstance(node, (cst.ClassDef, cst.FunctionDef)):
                return tuple(self._stack) == inner[: len(self._stack)]  # on the way to the region
            # A simple statement holds no class or function; anything else may.
            return not isinstance(node, (cst.SimpleStatementLine, cst.SimpleStatementSuite))
        return enter

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode) -> Any:
        result = super().on_leave(original_node, updated_node)
        if isinstance(original_node, (cst.ClassDef, cst.FunctionDef)):
            self._stack.pop()
            inner = self.scope.inner
            self._inside = tuple(self._stack[: len(inner)]) == inner
        return result

    def _span(self, node: cst.CSTNode) -> tuple[int, int]:
        pos = self.get_metadata(PositionProvider, node)
        return pos.start.line, pos.end.line

    def edited(self, node: cst.CSTNode, what: str) -> None:
        self.edits.append((*self._span(node), what))

    def unbinds(self, name: str) -> None:
        """Say that this edit removes the last binding of the module-level function or class
        `name` of the module (no other module of the package may import it: the codemod vouches
        for that). Where the edited module's tokens show nothing refers to it any more
        (`unreferenced`), a later scoped rule whose region is inside it is not needed: it would
        edit code that never runs, and is reported so instead of written."""
        self.unbound.append(name)

    def needs_human(self, node: cst.CSTNode, why: str) -> None:
        self.human.append((*self._span(node), why))


def dotted(node: cst.BaseExpression) -> str | None:
    """`a.b.c` for a plain Name/Attribute chain, else None."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        head = dotted(node.value)
        return None if head is None else f"{head}.{node.attr.value}"
    return None


def method_call(node: cst.CSTNode | None, receiver: str, method: str) -> cst.Call | None:
    """`node` if it is `<receiver>.<method>(...)` with the receiver a dotted name, else None."""
    if (isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute)
            and node.func.attr.value == method and dotted(node.func.value) == receiver):
        return node
    return None


def module_of(path: str) -> str | None:
    """`pkg/sub/mod.py` → `pkg.sub.mod` (`pkg/__init__.py` → `pkg`); None for a rule example."""
    if not path.endswith(".py") or path.startswith("<"):
        return None
    parts = path[: -len(".py")].split("/")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def line_map(before: str, after: str) -> Callable[[int], int]:
    """Lines of `after` (1-based) → the line of `before` they stand for (an inserted line: the one
    before it), so a site found in an intermediate module names the line the diff shows."""
    a, b = before.splitlines(), after.splitlines()
    mapping: dict[int, int] = {}
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        for k, j in enumerate(range(j1, j2)):
            if tag == "insert":
                mapping[j + 1] = max(i1, 1)  # i1 is 0-based: the line before the insertion
            else:
                mapping[j + 1] = min(i1 + k, i2 - 1) + 1
    return lambda line: mapping.get(line, line)


class TimeLimit(Exception):
    """A scoped transform ran past its time limit."""


@contextlib.contextmanager
def time_limit(seconds: float | None) -> Iterator[None]:
    """SIGPROF after `seconds` of this process's CPU time in the main thread (None, or elsewhere:
    no limit). CPU time, not the wall clock: a runaway transform spends CPU, and a box loaded by
    other work (a model loading beside it, a parallel test run) must not fail a transform that
    takes milliseconds of CPU."""
    if seconds is None or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum: int, frame: Any) -> None:
        raise TimeLimit(f"ran past its time limit ({seconds:g} s)")

    previous = signal.signal(signal.SIGPROF, expire)
    signal.setitimer(signal.ITIMER_PROF, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)


def _normal(source: str) -> str:
    tree = ast.parse(textwrap.dedent(source))
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            # A docstring's indentation is where the code stands, not what it says.
            body[0].value.value = inspect.cleandoc(body[0].value.value)
    return ast.dump(tree)


def same_code(node: cst.CSTNode, source: str) -> bool:
    """Whether `node` is the code in `source` up to layout, comments and docstring indentation."""
    code = cst.Module([]).code_for_node(node)
    try:
        return _normal(code) == _normal(source)
    except SyntaxError:
        return False


def statements(source: str, module: cst.Module) -> list[cst.BaseStatement]:
    """`source` (written with 4-space indents, no 4-space runs in its strings) as statements in
    the module's own indentation, for a codemod to insert (a block indents them where they go);
    blank lines and comments before the first statement stay with it."""
    unit = module.default_indent
    text = textwrap.dedent(source).replace("    ", unit)
    text = text[1:] if text.startswith("\n") else text  # the newline after an opening triple quote
    parsed = cst.parse_module(text, config=module.config_for_parsing)
    body: list[cst.BaseStatement] = list(parsed.body)
    first = body[0] if body else None
    if isinstance(first, (cst.SimpleStatementLine, cst.BaseCompoundStatement)) and parsed.header:
        # Blank lines and comments before the first statement parse as the module's header.
        # A blank line carries no indentation (no trailing whitespace where it is inserted).
        header = [line if line.comment is not None else cst.EmptyLine(indent=False) for line in parsed.header]
        body[0] = first.with_changes(leading_lines=[*header, *first.leading_lines])
    return body


def load_beside(codemod_file: str, name: str) -> Any:
    """Module `name` from the folder of `codemod_file`, imported once: codemods are loaded by
    path, not as a package, so helpers they share are loaded the same way."""
    import importlib.util
    import sys
    from pathlib import Path

    key = f"_vsp_codemods_{name}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, Path(codemod_file).with_name(f"{name}.py"))
        if spec is None or spec.loader is None:
            raise ImportError(f"no module {name!r} beside {codemod_file}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module  # before running it: a dataclass looks its module up
        spec.loader.exec_module(module)
    return sys.modules[key]


@dataclass(frozen=True)
class ImportDrop:
    """An import a scoped transform no longer needs: dropped where nothing uses it any more."""

    module: str
    obj: str | None  # None: `import module`
    what: str  # the edit's wording, when the import statement goes
    lines: tuple[int, int] | None  # the module-level statement naming it, in the module visited


def drop_unused_import(transform: ScopedTransform, original: cst.Module, updated: cst.Module,
                       module: str, obj: str | None, what: str) -> cst.Module:
    """Drop the import of `obj` from `module` (`import module` for None) where nothing uses it any
    more: libcst's RemoveImportsVisitor decides, once every scoped rule of the file has run (the
    engine runs it once per file for all the imports its transforms drop: each run analyses the
    scopes of the whole module, the costliest step of a dry run otherwise). `updated` is returned
    as it is; the import statement of `original` that named it is recorded as an edit of this
    rule when it goes, so its diff hunk carries the rule."""
    before = [s for s in original.body if names_import(s, module, obj)]
    lines = transform._span(before[0]) if before else None
    transform.imports_to_drop.append(ImportDrop(module, obj, what, lines))
    return updated


def remove_imports(module: cst.Module, drops: list[ImportDrop], shortcut: bool = True) -> cst.Module:
    """`module` without each import of `drops` that nothing uses: libcst's RemoveImportsVisitor.

    Its pass over the whole module (scopes, exports, string annotations, every node through the
    matchers) is the costliest step of a dry run. With `shortcut`, where the tokens of the module
    show that nothing can use an import (`_provably_unused`), the visitor runs over the statements
    that hold those imports alone, as a module of their own, and they are put back in place: the
    same visitor makes the same edit of each statement, and decides "unused", as it would over
    the whole module. Anywhere else (a name seen elsewhere, an import not at module level, a
    module the tokenizer cannot read) it runs over the whole module.

    A statement that imports one name and nothing else, which a drop names, is taken out of the
    body without the visitor: that is its edit there (the statement goes, with the lines above it
    that belong to it), and the visitor, with libcst.matchers under it, costs more than the rest of
    a dry run's import drops together."""
    at = _provably_unused(module, drops) if shortcut else None
    if at is None:
        return _visitor(drops).transform_module(module)
    body = list(module.body)
    for i in sorted(at, reverse=True):
        if _imports_one_dropped(body[i], drops):
            del body[i]
            continue
        alone = cst.Module(body=[body[i]], default_indent=module.default_indent,
                           default_newline=module.default_newline)
        body[i: i + 1] = list(_visitor(drops).transform_module(alone).body)
    return module.with_changes(body=body)


def _visitor(drops: list[ImportDrop]) -> Any:
    """libcst's RemoveImportsVisitor, told to drop each import of `drops` that nothing uses."""
    from libcst.codemod import CodemodContext
    from libcst.codemod.visitors import RemoveImportsVisitor

    context = CodemodContext()
    for drop in drops:
        RemoveImportsVisitor.remove_unused_import(context, drop.module, drop.obj)
    return RemoveImportsVisitor(context)


def _imports_one_dropped(stmt: cst.CSTNode, drops: list[ImportDrop]) -> bool:
    """Whether `stmt` is a line of one import statement of one name, not renamed (`as`) and not
    relative, that a drop names: RemoveImportsVisitor removes such a line whole where the name is
    unused (a relative or renamed import it keeps, for a drop of this kind)."""
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
        return False
    small = stmt.body[0]
    if isinstance(small, cst.Import):
        if len(small.names) != 1 or small.names[0].asname is not None:
            return False
        name = dotted(small.names[0].name)
        return any(d.obj is None and d.module == name for d in drops)
    if (isinstance(small, cst.ImportFrom) and not small.relative and small.module is not None
            and not isinstance(small.names, cst.ImportStar) and len(small.names) == 1):
        alias = small.names[0]
        if alias.asname is not None or not isinstance(alias.name, cst.Name):
            return False
        module = dotted(small.module)
        return any(d.obj == alias.name.value and d.module == module for d in drops)
    return False


def _provably_unused(module: cst.Module, drops: list[ImportDrop]) -> set[int] | None:
    """The module-level statements that import what `drops` name, where each imported name is one
    token of the whole module (the import itself) and no string holds it but a statement made of
    a string alone (a docstring: never an `__all__` entry nor a string annotation, which libcst
    counts as uses): nothing can use it, so RemoveImportsVisitor's analysis of the module would
    call it unused. None: that cannot be shown for every drop."""
    tokens = _Tokens.read(positions.code(module))
    if tokens is None:
        return None
    found: set[int] = set()
    for drop in drops:
        bound = drop.obj if drop.obj is not None else drop.module.split(".")[0]
        if drop.module == "__future__":
            return None  # never unused for libcst
        where = [i for i, stmt in enumerate(module.body) if names_import(stmt, drop.module, drop.obj)]
        if tokens.names(bound) != 1 or tokens.quoted(bound) or len(where) != 1:
            return None
        found.add(where[0])
    return found


def unreferenced(module: cst.Module, name: str) -> bool:
    """Whether the module defines `name` once at module level (a `def` or a `class`) and nothing in
    it refers to it: the definition's own name is its only token, and no string holds it but a
    docstring-like statement (a string in `__all__`, `getattr(...)` or an annotation may be a use)."""
    defined = [s for s in module.body if isinstance(s, (cst.FunctionDef, cst.ClassDef)) and s.name.value == name]
    tokens = _Tokens.read(positions.code(module))
    return len(defined) == 1 and tokens is not None and tokens.names(name) == 1 and not tokens.quoted(name)


_TOKENS: list[tuple[str, _Tokens | None]] = []  # the last code read, and its tokens


@dataclass(frozen=True)
class _Tokens:
    """A module's tokens, and which of its strings are a statement by themselves (a docstring, or
    one anywhere else: with its implicit concatenation, never part of an expression)."""

    all: tuple[Any, ...]
    alone: frozenset[tuple[int, int]]

    @classmethod
    def read(cls, code: str) -> _Tokens | None:
        # The same module's tokens serve the imports it drops and each function it unbinds.
        if _TOKENS and _TOKENS[0][0] is code:
            return _TOKENS[0][1]
        found = cls._read(code)
        _TOKENS[:] = [(code, found)]
        return found

    @classmethod
    def _read(cls, code: str) -> _Tokens | None:
        import io
        import tokenize

        try:
            tokens = tuple(tokenize.generate_tokens(io.StringIO(code).readline))
        except (tokenize.TokenError, SyntaxError):
            return None
        significant = [t for t in tokens if t.type not in (tokenize.NL, tokenize.COMMENT)]
        alone = set()
        for i, t in enumerate(significant):
            if t.type != tokenize.STRING:
                continue
            a, b = i, i
            while a > 0 and significant[a - 1].type == tokenize.STRING:
                a -= 1
            while b + 1 < len(significant) and significant[b + 1].type == tokenize.STRING:
                b += 1
            before = significant[a - 1].type if a > 0 else tokenize.NEWLINE
            after = significant[b + 1].type if b + 1 < len(significant) else tokenize.ENDMARKER
            if (before in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING)
                    and after in (tokenize.NEWLINE, tokenize.ENDMARKER)):
                alone.add(t.start)
        return cls(tokens, frozenset(alone))

    def names(self, name: str) -> int:
        """How many NAME tokens are `name`."""
        import tokenize

        return sum(1 for t in self.all if t.type == tokenize.NAME and t.string == name)

    def quoted(self, name: str) -> bool:
        """Whether a string (an f-string's part included) holds `name`, other than one alone."""
        import tokenize

        return any(t.type not in (tokenize.NAME, tokenize.NL, tokenize.COMMENT) and name in t.string
                   and t.start not in self.alone for t in self.all)


def names_import(stmt: cst.CSTNode, module: str, obj: str | None) -> bool:
    """Whether `stmt` is a simple statement line importing `obj` from `module` (or `module`)."""
    if not isinstance(stmt, cst.SimpleStatementLine):
        return False
    for small in stmt.body:
        if obj is None and isinstance(small, cst.Import):
            if any(dotted(a.name) == module and a.asname is None for a in small.names):
                return True
        if (obj is not None and isinstance(small, cst.ImportFrom) and small.module is not None
                and dotted(small.module) == module and not isinstance(small.names, cst.ImportStar)
                and any(isinstance(a.name, cst.Name) and a.name.value == obj for a in small.names)):
            return True
    return False

"""Find every use a module makes of vLLM, by qualified name, with the shape binding needs.

Read with `ast` (the standard library's parser, a few milliseconds a file), not libcst: nothing
here rewrites code. A use is one of

- ``import``: a module or name imported from vLLM (``from vllm.v1.request import Request``);
- ``call``: a call of an imported name or of an attribute chain on it (``Request(...)``);
- ``method``: a call of a method on an object whose vLLM class is evident in the same function
  or class: ``self.x = Scheduler(...)`` then ``self.x.add_request(...)``, a local
  ``x = Scheduler(...)``, a parameter or attribute annotated with a vLLM class, or a method of
  the same class annotated to return one;
- ``attribute``: an attribute read on a vLLM module or class (``RequestStatus.FINISHED_ABORTED``)
  or on such an instance (``self.vllm_config.cache_config``).

A worker extension (a class the package names in ``worker_extension_cls="pkg.mod.Class"``: vLLM
mixes it into its GPU Worker) reads the Worker's model runner as ``self.model_runner``, which the
class never sets: its attribute reads and method calls on it (``self.model_runner.input_batch``)
are uses of the runner the Worker builds (``Worker.model_runner``, checked against the class that
field is annotated with), one level deep.

Only what the source of the package shows is typed; anything else is not a use of vLLM as far as
this scan can tell (it never guesses a type).
"""

from __future__ import annotations

import ast
import io
import tokenize
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..vllm_source import resolve_relative, unwrap_annotation

if TYPE_CHECKING:
    from ..signatures.model import BindResult, Signature

CALL, METHOD, IMPORT, ATTRIBUTE = "call", "method", "import", "attribute"
_INSTANCE = ("inst", "decl")
# vLLM's GPU Worker, which a worker extension is mixed into (ParallelConfig's worker_cls "auto" on
# CUDA), and its field holding the model runner it builds.
WORKER = "vllm.v1.worker.gpu_worker.Worker"
RUNNER = "model_runner"
EXTENSION_KEYWORD = "worker_extension_cls"


@dataclass(frozen=True)
class CallRecord:
    path: str
    line: int
    callee: str  # the qualified name used: a callee, an imported name, an attribute
    n_positional: int
    keywords: tuple[str, ...]
    star_args: bool
    star_kwargs: bool
    code: str  # the use's own source text
    end_line: int = 0  # the use's last line (0: unknown), to find the calls inside a site's lines
    kind: str = CALL  # CALL | METHOD | IMPORT | ATTRIBUTE
    # METHOD and ATTRIBUTE: the owner is an instance of the class `callee` is under (self bound).
    on_instance: bool = False
    # ... known only from an annotation: at run time it may be a subclass that has the name.
    declared: bool = False
    # Inside a feature test (`try: ... except ImportError`, `if hasattr(...)`, a version check):
    # what it says, e.g. "in the try/except ImportError at line 12". A miss there is by design.
    conditional: str = ""

    @property
    def is_call(self) -> bool:
        return self.kind in (CALL, METHOD)

    @property
    def whole_module(self) -> bool:
        """An import of the module itself (`import a.b`, `from a.b import *`), not of a name in it."""
        return self.kind == IMPORT and (self.code.lstrip().startswith("import ")
                                        or self.code.rstrip().endswith("import *"))

    @property
    def owner(self) -> str:
        return self.callee.rpartition(".")[0]

    def bind(self, signature: Signature) -> BindResult:
        return signature.bind(
            self.n_positional, self.keywords, star_args=self.star_args, star_kwargs=self.star_kwargs
        )


# ---------------------------------------------------------------------------- types in the package

# What an expression evaluates to, as far as the package's source shows: ("ref", qualname) for a
# vLLM module, class or function named through imports; ("inst", qualname) for what calling it
# made (an instance of exactly that class, or what that function returns); ("decl", qualname) for
# an object only annotated as that class (at run time it may be a subclass); ("runner", the
# Worker's field) for a worker extension's `self.model_runner`: the runner the Worker built.
Val = tuple[str, str]


def _import_names(stmts: Iterable[ast.stmt], module: str, prefixes: tuple[str, ...]) -> dict[str, str]:
    """local name -> qualified name for the imports among `stmts` (nested blocks included); a name
    two imports bind to different things (`if cuda: from a import ops / else: from b import
    ops`) depends on the run and is left out."""
    out = _Bindings()
    for node in stmts:
        for sub in _walk(node) if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else ():
            if isinstance(sub, ast.Import):
                for a in sub.names:
                    if a.asname:
                        out[a.asname] = a.name
                    else:
                        out[a.name.split(".")[0]] = a.name.split(".")[0]
            elif isinstance(sub, ast.ImportFrom):
                base = _absolute(sub, module)
                for a in sub.names:
                    if a.name != "*":
                        out[a.asname or a.name] = f"{base}.{a.name}"
    return out.resolved()


class _Bindings(dict):  # type: ignore[type-arg]
    def __init__(self) -> None:
        super().__init__()
        self.clashes: set[str] = set()

    def __setitem__(self, key: str, value: str) -> None:
        if key in self and self[key] != value:
            self.clashes.add(key)
        super().__setitem__(key, value)

    def resolved(self) -> dict[str, str]:
        return {k: v for k, v in self.items() if k not in self.clashes}


def _absolute(stmt: ast.ImportFrom, module: str) -> str:
    # `module` of `pkg/__init__.py` is `pkg.__init__`: its package is what precedes the last dot.
    found = resolve_relative(module.rpartition(".")[0], stmt.level, stmt.module)
    return "" if found is None else found  # above the top package: nothing of vLLM's


class _Scanner:
    def __init__(self, source: str, path: str, prefixes: tuple[str, ...], extensions: frozenset[str] = frozenset()):
        self.source = source
        self.extensions = extensions  # "module.Class" of the package's worker extensions
        self.blines = source.encode("utf-8").splitlines(keepends=True)
        self.path = path
        self.prefixes = prefixes
        # The package's own modules resolve relative imports; the vLLM ones are all that count.
        # `pkg/__init__.py` stays `pkg.__init__`, so one level up is `pkg` as for its modules.
        self.module = path[: -len(".py")].replace("/", ".") if path.endswith(".py") else path
        self.found: list[CallRecord] = []

    # -- helpers -------------------------------------------------------------------------

    def _ours(self, qualname: str) -> bool:
        return qualname.startswith(self.prefixes) or qualname + "." in self.prefixes

    def _code(self, node: ast.AST) -> str:
        # ast.get_source_segment splits the whole source on every call; offsets are UTF-8 bytes.
        start, end = node.lineno - 1, node.end_lineno  # type: ignore[attr-defined]
        if end is None:
            return ""
        chunk = self.blines[start:end]
        if not chunk:
            return ""
        if len(chunk) == 1:
            text = chunk[0][node.col_offset:node.end_col_offset]  # type: ignore[attr-defined]
        else:
            text = chunk[0][node.col_offset:] + b"".join(chunk[1:-1]) + chunk[-1][:node.end_col_offset]  # type: ignore[attr-defined]
        return text.decode("utf-8", "replace").replace("\r\n", "\n")

    def _record(self, node: ast.AST, kind: str, qualname: str, on_instance: bool = False,
                call: ast.Call | None = None, declared: bool = False, at: ast.AST | None = None) -> None:
        """`at`: where the use is, when not `node` itself (one name of a multi-line import)."""
        args = call.args if call is not None else []
        kws = call.keywords if call is not None else []
        place = at if at is not None else call if call is not None else node
        self.found.append(CallRecord(
            path=self.path,
            line=(at or node).lineno,  # type: ignore[attr-defined]
            callee=qualname,
            n_positional=sum(1 for a in args if not isinstance(a, ast.Starred)),
            keywords=tuple(k.arg for k in kws if k.arg is not None),
            star_args=any(isinstance(a, ast.Starred) for a in args),
            star_kwargs=any(k.arg is None for k in kws),
            code=self._code(call if call is not None else node),
            end_line=place.end_lineno or (at or node).lineno,  # type: ignore[attr-defined]
            kind=kind,
            on_instance=on_instance,
            declared=declared,
            conditional=self._conditional((at or node).lineno),  # type: ignore[attr-defined]
        ))

    def _conditional(self, line: int) -> str:
        # Innermost first: the ranges are collected outside in.
        for start, end, why in reversed(self.guards):
            if start <= line <= end:
                return why
        return ""

    # -- the module ----------------------------------------------------------------------

    def run(self, tree: ast.Module) -> list[CallRecord]:
        self.guards = _feature_tests(tree)
        names = _import_names(tree.body, self.module, self.prefixes)
        self._imports(tree)
        self._body(tree.body, names, {}, None)
        self.found.sort(key=lambda r: (r.line, _KIND_ORDER[r.kind]))
        return self.found

    def _imports(self, tree: ast.Module) -> None:
        for node in _walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if self._ours(a.name):
                        self._record(node, IMPORT, a.name, at=a)
            elif isinstance(node, ast.ImportFrom):
                base = _absolute(node, self.module)
                if not self._ours(base):
                    continue
                for a in node.names:
                    self._record(node, IMPORT, base if a.name == "*" else f"{base}.{a.name}", at=a)

    def _body(self, body: list[ast.stmt], names: dict[str, str], env: dict[str, Val],
              cls: _ClassInfo | None) -> None:
        """Visit statements; functions and classes get a scope of their own."""
        for stmt in body:
            if isinstance(stmt, ast.ClassDef):
                for expr in [*stmt.decorator_list, *stmt.bases, *(k.value for k in stmt.keywords)]:
                    self._expr(expr, names, env, None)
                info = _ClassInfo.read(stmt, self, names)
                if f"{self.module}.{stmt.name}" in self.extensions and RUNNER not in info.own:
                    info.runner = f"{WORKER}.{RUNNER}"
                self._body(stmt.body, names, {}, info)
            elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for expr in stmt.decorator_list:
                    self._expr(expr, names, env, None)
                self._function(stmt, names, cls)
            else:
                self._stmt(stmt, names, env, cls)

    def _function(self, fn: ast.FunctionDef | ast.AsyncFunctionDef, outer: dict[str, str],
                  cls: _ClassInfo | None) -> None:
        names = {**outer, **_import_names(fn.body, self.module, self.prefixes)}
        env: dict[str, Val] = {}
        args = [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]
        for arg in args:
            ann = unwrap_annotation(arg.annotation)
            val = self._value_of_name_chain(ann, names) if ann is not None else None
            if val is not None and val[0] == "ref":
                env[arg.arg] = ("decl", val[1])
        self_name = args[0].arg if cls is not None and args and not _is_static(fn) else None
        # Locals: typed only when every assignment to the name gives the same evident vLLM class.
        assigned: dict[str, set[Val | None]] = {}
        for node in _walk_function(fn):
            targets: list[ast.expr] = []
            value: ast.expr | None = None
            if isinstance(node, ast.Assign):
                targets, value = node.targets, node.value
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                ann = unwrap_annotation(node.annotation)
                val = self._value_of_name_chain(ann, names) if ann is not None else None
                assigned.setdefault(node.target.id, set()).add(("decl", val[1]) if val and val[0] == "ref" else None)
                continue
            elif isinstance(node, (ast.AugAssign, ast.For, ast.AsyncFor, ast.withitem, ast.NamedExpr)):
                target = node.optional_vars if isinstance(node, ast.withitem) else node.target
                targets = [target] if target is not None else []
            for target in targets:
                for name in _stored_names(target):
                    typed = (isinstance(target, ast.Name) and value is not None
                             and self._type(value, names, {}, cls, self_name))
                    assigned.setdefault(name, set()).add(typed if typed and typed[0] in _INSTANCE else None)
        for name, vals in assigned.items():
            if name in env:
                continue
            if len(vals) == 1 and None not in vals:
                env[name] = next(iter(vals))  # type: ignore[assignment]
        for arg in args:
            if arg.arg in assigned and arg.arg in env and assigned[arg.arg] != {env[arg.arg]}:
                del env[arg.arg]  # a parameter reassigned to something else
        if self_name is not None and cls is not None:
            env[self_name] = ("self", cls.name)
        for default in [*fn.args.defaults, *(d for d in fn.args.kw_defaults if d is not None)]:
            self._expr(default, outer, {}, None)
        # Annotations are evaluated when the def runs (unless postponed): uses like any other.
        for ann in [*(a.annotation for a in args), fn.returns]:
            if ann is not None:
                self._expr(ann, outer, {}, None)
        self._body(fn.body, names, env, cls)

    def _stmt(self, stmt: ast.stmt, names: dict[str, str], env: dict[str, Val], cls: _ClassInfo | None) -> None:
        self._children(stmt, names, env, cls)

    def _children(self, node: ast.AST, names: dict[str, str], env: dict[str, Val], cls: _ClassInfo | None) -> None:
        """Statements and expressions under `node`, through the nodes that are neither (except
        handlers, with-items, match cases and patterns, comprehensions)."""
        for child in _children(node):
            if isinstance(child, ast.stmt):
                self._body([child], names, env, cls)
            elif isinstance(child, ast.expr):
                self._expr(child, names, env, cls)
            else:
                self._children(child, names, env, cls)

    # -- expressions -----------------------------------------------------------------------

    def _value_of_name_chain(self, node: ast.expr | None, names: dict[str, str]) -> Val | None:
        """A Name/Attribute chain that starts at an imported vLLM name: ("ref", qualname)."""
        parts: list[str] = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name) or node.id not in names:
            return None
        qual = ".".join([names[node.id], *reversed(parts)])
        return ("ref", qual) if self._ours(qual) else None

    def _type(self, node: ast.expr, names: dict[str, str], env: dict[str, Val], cls: _ClassInfo | None,
              self_name: str | None = None) -> Val | None:
        """What `node` evaluates to, when the package's source makes it evident."""
        if isinstance(node, ast.Name):
            if node.id in env:
                return env[node.id]
            if self_name is not None and node.id == self_name and cls is not None:
                return ("self", cls.name)
            return self._value_of_name_chain(node, names)
        if isinstance(node, ast.Attribute):
            owner = self._type(node.value, names, env, cls, self_name)
            if owner is None:
                return None
            if owner[0] == "ref":
                return ("ref", f"{owner[1]}.{node.attr}")
            if owner[0] == "self" and cls is not None:
                if node.attr == RUNNER and cls.runner is not None:
                    return ("runner", cls.runner)
                return cls.attrs.get(node.attr)
            if owner[0] == "runner":
                return None  # one level: the runner's own fields are not annotated (V1's input_batch)
            # An attribute of a vLLM object: its type is what vLLM's class annotates (the checker
            # reads it); at run time it may be a subclass of that.
            return ("decl", f"{owner[1]}.{node.attr}") if owner[0] in _INSTANCE else None
        if isinstance(node, ast.Call):
            func = self._type(node.func, names, env, cls, self_name)
            if func is not None and func[0] == "ref":
                return ("inst", func[1])
            if (func is None and cls is not None and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Name)
                    and self._type(node.func.value, names, env, cls, self_name) == ("self", cls.name)):
                return cls.returns.get(node.func.attr)
            return None
        if isinstance(node, ast.NamedExpr):
            return self._type(node.value, names, env, cls, self_name)
        return None

    def _expr(self, node: ast.expr, names: dict[str, str], env: dict[str, Val], cls: _ClassInfo | None) -> None:
        if isinstance(node, ast.Call):
            func = node.func
            callee = self._type(func, names, env, cls)
            if callee is not None and callee[0] == "ref":
                self._record(node, CALL, callee[1], call=node)
                self._inner(func, names, env, cls)
            elif (isinstance(func, ast.Attribute) and (owner := self._type(func.value, names, env, cls))
                  and owner[0] in (*_INSTANCE, "runner")):
                self._record(node, METHOD, f"{owner[1]}.{func.attr}", on_instance=True, call=node,
                             declared=owner[0] == "decl")
                self._expr(func.value, names, env, cls)
            else:
                self._expr(func, names, env, cls)
            for arg in node.args:
                self._expr(arg, names, env, cls)
            for kw in node.keywords:
                self._expr(kw.value, names, env, cls)
            return
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            owner = self._type(node.value, names, env, cls)
            if owner is not None and owner[0] in ("ref", *_INSTANCE, "runner"):
                self._inner(node.value, names, env, cls)  # `a.b` before `a.b.c`, as they run
                self._record(node, ATTRIBUTE, f"{owner[1]}.{node.attr}", on_instance=owner[0] != "ref",
                             declared=owner[0] == "decl")
                return
        if isinstance(node, ast.Lambda):
            self._expr(node.body, names, {k: v for k, v in env.items() if k not in _lambda_args(node)}, cls)
            return
        for child in _children(node):
            if isinstance(child, ast.expr):
                self._expr(child, names, env, cls)
            elif isinstance(child, ast.comprehension):
                for sub in (child.iter, child.target, *child.ifs):
                    self._expr(sub, names, env, cls)
            elif isinstance(child, ast.keyword):
                self._expr(child.value, names, env, cls)

    def _inner(self, node: ast.expr, names: dict[str, str], env: dict[str, Val], cls: _ClassInfo | None) -> None:
        """The owner of a recorded attribute chain: only what is not part of the chain itself
        (an instance's own attribute reads are uses; a module path's prefixes are not)."""
        if isinstance(node, ast.Attribute):
            owner = self._type(node.value, names, env, cls)
            if owner is not None and owner[0] in _INSTANCE:
                self._inner(node.value, names, env, cls)
                self._record(node, ATTRIBUTE, f"{owner[1]}.{node.attr}", on_instance=True,
                             declared=owner[0] == "decl")
                return
            if owner is not None and owner[0] == "ref":
                return
            self._expr(node, names, env, cls)
        elif not isinstance(node, ast.Name):
            self._expr(node, names, env, cls)


_KIND_ORDER = {IMPORT: 0, CALL: 1, METHOD: 1, ATTRIBUTE: 2}


@dataclass
class _ClassInfo:
    name: str
    attrs: dict[str, Val]  # self.x -> ("inst"/"decl", qualname): only when every assignment agrees
    returns: dict[str, Val]  # method -> ("decl", qualname) from its return annotation
    own: frozenset[str] = frozenset()  # names the class binds: in its body, or as self.x anywhere
    runner: str | None = None  # a worker extension: the Worker's field its self.model_runner is

    @classmethod
    def read(cls, node: ast.ClassDef, scanner: _Scanner, names: dict[str, str]) -> _ClassInfo:
        info = cls(node.name, {}, {}, _own_names(node))
        seen: dict[str, set[Val | None]] = {}

        def note(attr: str, val: Val | None) -> None:
            seen.setdefault(attr, set()).add(val if val is not None and val[0] in _INSTANCE else None)

        def annotated(ann: ast.expr | None) -> Val | None:
            target = unwrap_annotation(ann)
            val = scanner._value_of_name_chain(target, names) if target is not None else None
            return ("decl", val[1]) if val is not None else None

        for stmt in node.body:
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                note(stmt.target.id, annotated(stmt.annotation))
            elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                ret = annotated(stmt.returns)
                if ret is not None:
                    info.returns[stmt.name] = ret
        for stmt in node.body:
            if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) or _is_static(stmt):
                continue
            args = [*stmt.args.posonlyargs, *stmt.args.args]
            if not args:
                continue
            me = args[0].arg
            fn_names = {**names, **_import_names(stmt.body, scanner.module, scanner.prefixes)}
            for sub in _walk_function(stmt):
                pairs: list[tuple[ast.expr, ast.expr | None, ast.expr | None]] = []
                if isinstance(sub, ast.Assign):
                    pairs = [(t, sub.value, None) for t in sub.targets]
                elif isinstance(sub, ast.AnnAssign):
                    pairs = [(sub.target, sub.value, sub.annotation)]
                elif isinstance(sub, (ast.AugAssign, ast.For, ast.AsyncFor)):
                    pairs = [(sub.target, None, None)]
                elif isinstance(sub, ast.withitem) and sub.optional_vars is not None:
                    pairs = [(sub.optional_vars, None, None)]
                for target, value, ann in pairs:
                    for t in _flat_targets(target):
                        if not (isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == me):
                            continue
                        if ann is not None:
                            note(t.attr, annotated(ann))
                        elif value is None or t is not target:
                            note(t.attr, None)
                        elif isinstance(value, ast.Constant) and value.value is None:
                            continue  # `self.x = None` before the real value: not a different type
                        else:
                            note(t.attr, scanner._type(value, fn_names, {}, info, me))
        info.attrs = {k: next(iter(v)) for k, v in seen.items() if len(v) == 1 and None not in v}  # type: ignore[misc]
        return info


def _own_names(node: ast.ClassDef) -> frozenset[str]:
    """What the class binds itself: its body's names, and every `X.attr = ...` in its methods
    (nested functions included) whose X is a method's first parameter's name."""
    out: set[str] = set()
    for stmt in node.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(stmt.name)
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for target in stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]:
                out.update(_stored_names(target))
    me = {fn.args.args[0].arg for fn in node.body
          if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and fn.args.args}
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute) and isinstance(sub.ctx, ast.Store) and isinstance(sub.value, ast.Name) \
                and sub.value.id in me:
            out.add(sub.attr)
    return frozenset(out)


def worker_extensions(sources: Iterable[bytes]) -> frozenset[str]:
    """The classes the package names as vLLM worker extensions: the string constants passed as
    `worker_extension_cls=` anywhere in `sources` ("pkg.mod.Class"). A file that cannot be read
    names none (the scan of it says why)."""
    out: set[str] = set()
    for source in sources:
        if EXTENSION_KEYWORD.encode() not in source:
            continue
        try:
            tree = ast.parse(source_text(source, ""))
        except (Unscanned, SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        for node in ast.walk(tree):
            if (isinstance(node, ast.keyword) and node.arg == EXTENSION_KEYWORD
                    and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
                out.add(node.value.value)
    return frozenset(out)


_TOLERANT = frozenset({"ImportError", "ModuleNotFoundError", "AttributeError", "TypeError", "Exception",
                       "BaseException"})


def _feature_tests(tree: ast.Module) -> list[tuple[int, int, str]]:
    """Line ranges whose code runs only if a feature test says so: the body, handlers and else of
    a try that catches ImportError/AttributeError/TypeError/Exception (or anything), a
    `with contextlib.suppress(ImportError)`, and both branches of an if testing hasattr/getattr, a
    version or TYPE_CHECKING."""
    out = []
    for node in _walk(tree):
        if isinstance(node, ast.Try) or type(node).__name__ == "TryStar":
            caught = []
            for h in node.handlers:  # type: ignore[attr-defined]
                types = h.type.elts if isinstance(h.type, ast.Tuple) else [h.type]
                caught += ["everything" if t is None else ast.unparse(t).rpartition(".")[2] for t in types]
            hit = next((c for c in caught if c == "everything" or c in _TOLERANT), None)
            if hit is not None:
                why = f"in the try/except {'' if hit == 'everything' else hit + ' '}at line {node.lineno}"
                out.append((node.lineno, node.end_lineno or node.lineno, why.replace("  ", " ")))
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                call = item.context_expr
                if (isinstance(call, ast.Call) and ast.unparse(call.func).rpartition(".")[2] == "suppress"
                        and any(ast.unparse(a).rpartition(".")[2] in _TOLERANT for a in call.args)):
                    out.append((node.lineno, node.end_lineno or node.lineno,
                                f"under `with {ast.unparse(call)}` at line {node.lineno}"))
                    break
        elif isinstance(node, ast.If):
            words = {n.id for n in _walk(node.test) if isinstance(n, ast.Name)}
            words |= {n.attr for n in _walk(node.test) if isinstance(n, ast.Attribute)}
            if words & {"hasattr", "getattr", "TYPE_CHECKING"} or any("version" in w.lower() for w in words):
                out.append((node.lineno, node.end_lineno or node.lineno,
                            f"under `if {ast.unparse(node.test)}` at line {node.lineno}"))
    out.sort(key=lambda r: (r[0], -r[1]))
    return out


def _children(node: ast.AST) -> list[ast.AST]:
    """`ast.iter_child_nodes`, in its order, as a list: the scan walks every node several times,
    and the generators of `ast` cost about half of it."""
    out: list[ast.AST] = []
    for name in node._fields:
        value = getattr(node, name, None)
        if isinstance(value, ast.AST):
            out.append(value)
        elif isinstance(value, list):
            out += [item for item in value if isinstance(item, ast.AST)]
    return out


def _walk(node: ast.AST) -> Iterator[ast.AST]:
    """`ast.walk` (breadth first, the same order) over `_children`."""
    todo = deque([node])
    while todo:
        node = todo.popleft()
        todo.extend(_children(node))
        yield node


def _is_static(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in fn.decorator_list)


def _walk_function(fn: ast.AST) -> Iterator[ast.AST]:
    """Nodes of a function body, not descending into nested functions, classes or lambdas."""
    stack = list(_children(fn))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            stack.extend(_children(node))


def _flat_targets(target: ast.expr) -> list[ast.expr]:
    if isinstance(target, (ast.Tuple, ast.List)):
        return [t for elt in target.elts for t in _flat_targets(elt)]
    if isinstance(target, ast.Starred):
        return _flat_targets(target.value)
    return [target]


def _stored_names(target: ast.expr) -> list[str]:
    return [t.id for t in _flat_targets(target) if isinstance(t, ast.Name)]


def _lambda_args(node: ast.Lambda) -> set[str]:
    a = node.args
    return {x.arg for x in [*a.posonlyargs, *a.args, *a.kwonlyargs]} | {
        x.arg for x in (a.vararg, a.kwarg) if x is not None}


# ---------------------------------------------------------------------------- entry points

class Unscanned(Exception):
    """A file that mentions vLLM but cannot be read: never reported as "no uses"."""

    def __init__(self, path: str, reason: str):
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


def source_text(source: bytes, path: str) -> str:
    """`source` decoded as Python decodes it: a UTF-8 BOM dropped, a coding cookie honoured."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(source).readline)
        return source.decode(encoding)
    except (SyntaxError, LookupError, UnicodeDecodeError) as exc:
        raise Unscanned(path, f"cannot decode ({exc})") from None


def scan_uses(source: bytes, path: str, prefixes: Iterable[str] = ("vllm.",),
              extensions: frozenset[str] = frozenset()) -> list[CallRecord]:
    """Every use of vLLM in `source` (imports, calls, method calls, attribute reads), by line;
    `extensions`: the package's worker extensions (`worker_extensions`), whose model runner reads
    are uses of the Worker's runner.

    Raises `Unscanned` for a file that mentions vLLM but cannot be decoded, parsed or walked."""
    prefix = tuple(prefixes)
    if not any(p.split(".")[0].encode() in source for p in prefix):
        return []
    text, tree = _parse(source, path)
    try:
        return _Scanner(text, path, prefix, extensions).run(tree)
    except RecursionError:
        # The target compiles what CPython's parser accepts; this walk is recursive and stops sooner.
        raise Unscanned(path, _TOO_DEEP) from None


def scan_imports(source: bytes, path: str, skip: Iterable[str]) -> list[CallRecord]:
    """Every absolute import in `source` of a top-level package not in `skip` (the package's
    own, vLLM), by line: `import a.b` is a use of `a.b`, `from a.b import c` of `a.b.c`. A
    relative import is the package's own. Feature tests mark a use `conditional`, as for vLLM.

    Raises `Unscanned` for a file that cannot be decoded or parsed."""
    text, tree = _parse(source, path)
    scanner = _Scanner(text, path, ())
    try:
        scanner.guards = _feature_tests(tree)  # ast.unparse recurses
    except RecursionError:
        raise Unscanned(path, _TOO_DEEP) from None
    tops = frozenset(skip)
    for node in _walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] not in tops:
                    scanner._record(node, IMPORT, a.name, at=a)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            if node.module.split(".")[0] in tops:
                continue
            for a in node.names:
                scanner._record(node, IMPORT, node.module if a.name == "*" else f"{node.module}.{a.name}", at=a)
    scanner.found.sort(key=lambda r: r.line)
    return scanner.found


def _parse(source: bytes, path: str) -> tuple[str, ast.Module]:
    text = source_text(source, path)
    try:
        tree = ast.parse(text, filename=path)
    except SyntaxError as exc:
        raise Unscanned(path, f"syntax error at line {exc.lineno}: {exc.msg}") from None
    except ValueError as exc:  # a NUL byte, on Python before 3.12
        raise Unscanned(path, f"cannot parse ({exc})") from None
    except (RecursionError, MemoryError):
        raise Unscanned(path, _TOO_DEEP) from None
    return text, tree


_TOO_DEEP = "nested too deeply for the scanner (a generated expression?)"


def scan(source: bytes, path: str, prefixes: Iterable[str] = ("vllm.",)) -> list[CallRecord]:
    """Every call in `source` whose callee resolves through imports to a name under `prefixes`."""
    return [r for r in scan_uses(source, path, prefixes) if r.kind == CALL]


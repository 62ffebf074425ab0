"""Read callable signatures from vLLM's source with `ast`; nothing is imported.

The resolver follows Python's own rules as far as they can be read off the source (imports,
re-exports, the MRO, dataclass-like code generation) and raises `Unknown` with a reason at the
first point where the runtime could differ from what the source says. Callers turn `Unknown`
into "no signature": a wrong guess here would make a guard drop an argument vLLM still needs.
"""

from __future__ import annotations

import ast
import builtins
import zipfile
from dataclasses import dataclass
from pathlib import Path

RawParam = tuple[str, str, bool]  # (name, inspect kind name in lower case, required)

POS_ONLY, POS_OR_KW, VAR_POS, KW_ONLY, VAR_KW = (
    "positional_only",
    "positional_or_keyword",
    "var_positional",
    "keyword_only",
    "var_keyword",
)


class Unknown(Exception):
    """The source does not decide the signature; the message says why."""


# Decorators on a def that leave the call signature as written.
_PLAIN_FUNC_DECORATORS = frozenset(
    {
        "builtins.staticmethod",
        "builtins.classmethod",
        "functools.lru_cache",
        "functools.cache",
        "typing.override",
        "typing_extensions.override",
        "typing.final",
        "typing_extensions.final",
        "typing_extensions.deprecated",
        "warnings.deprecated",
        "typing.no_type_check",
        "abc.abstractmethod",
        "contextlib.contextmanager",
        "contextlib.asynccontextmanager",
        "torch.inference_mode",
        "torch.no_grad",
        "torch.enable_grad",
        "typing.dataclass_transform",
        "typing_extensions.dataclass_transform",
    }
)
# Matched by spelling: the scope reader runs before any name can be resolved.
_OVERLOAD_SPELLINGS = ("overload", "typing.overload", "typing_extensions.overload")
# Class decorators that return the class they were given.
_PLAIN_CLASS_DECORATORS = frozenset(
    {
        "typing.final",
        "typing_extensions.final",
        "functools.total_ordering",
        "typing.runtime_checkable",
        "typing_extensions.runtime_checkable",
        "typing_extensions.deprecated",
        "warnings.deprecated",
        "enum.unique",
        "typing.type_check_only",
    }
)
# External bases whose constructor is object's: they add no __init__ or __new__.
_TRANSPARENT_BASES = frozenset(
    {
        "builtins.object",
        "abc.ABC",
        "typing.Generic",
        "typing_extensions.Generic",
    }
)
_STRUCT = "msgspec.Struct"
_PLAIN_METACLASSES = frozenset({"abc.ABCMeta", "builtins.type"})
_DATACLASS_TRANSFORM = frozenset(
    {"typing.dataclass_transform", "typing_extensions.dataclass_transform"}
)
_STDLIB_DATACLASS = "dataclasses.dataclass"
_PYDANTIC_DATACLASS = "pydantic.dataclasses.dataclass"
_CONFIG_DICT = frozenset({"pydantic.ConfigDict", "pydantic.config.ConfigDict"})
_CLASSVAR = frozenset({"typing.ClassVar", "typing_extensions.ClassVar"})
_ANNOTATED = frozenset({"typing.Annotated", "typing_extensions.Annotated"})
_KW_ONLY_SENTINEL = "dataclasses.KW_ONLY"
_STDLIB_FIELD = "dataclasses.field"
_PYDANTIC_FIELD = frozenset({"pydantic.Field", "pydantic.fields.Field"})
_MSGSPEC_FIELD = "msgspec.field"


@dataclass(eq=False)
class _Module:
    name: str
    path: str  # relative to the root, e.g. "vllm/config/__init__.py"
    is_package: bool
    scope: _Scope


@dataclass(frozen=True)
class _Ext:
    """Something outside the parsed packages, known only by its qualified name."""

    qualname: str


@dataclass(eq=False)
class _Func:
    module: _Module
    node: ast.FunctionDef | ast.AsyncFunctionDef


@dataclass(eq=False)
class _Class:
    module: _Module
    node: ast.ClassDef
    scope: _Scope

    @property
    def label(self) -> str:
        return f"{self.module.name}.{self.node.name}"

    @property
    def origin(self) -> str:
        return f"{self.module.path}:{self.node.lineno}"


_Obj = _Module | _Ext | _Func | _Class
_Mro = list[_Class | str]  # str: the qualname of a known external base


@dataclass(frozen=True)
class _Binding:
    kind: str  # "import" | "from" | "def" | "assign" | "other"
    node: ast.AST
    stmt: ast.AST | None = None
    line: int = 0


@dataclass(eq=False)
class _Scope:
    """The names a module or class body binds, read without executing it."""

    bindings: dict[str, list[_Binding]]
    overloads: set[str]
    star_imports: list[ast.ImportFrom]
    nested_annotations: bool  # an annotated name inside if/try/with/for: fields are not static

    @classmethod
    def read(cls, body: list[ast.stmt]) -> _Scope:
        scope = cls({}, set(), [], False)
        scope._walk(body, nested=False)
        return scope

    def _add(
        self, name: str, kind: str, node: ast.AST, line: int, stmt: ast.AST | None = None
    ) -> None:
        self.bindings.setdefault(name, []).append(_Binding(kind, node, stmt, line))

    def _walk(self, body: list[ast.stmt], nested: bool) -> None:
        for stmt in body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if any(_dotted(d) in _OVERLOAD_SPELLINGS for d in stmt.decorator_list):
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
    return _dotted(test) in (
        "TYPE_CHECKING",
        "typing.TYPE_CHECKING",
        "typing_extensions.TYPE_CHECKING",
    )


def _dotted(expr: ast.AST) -> str | None:
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


def _literal(expr: ast.expr | None, what: str) -> object:
    try:
        return ast.literal_eval(expr) if expr is not None else None
    except (ValueError, TypeError, SyntaxError):
        raise Unknown(f"{what} is not a literal: {ast.unparse(expr)}") from None


@dataclass(frozen=True)
class _Spec:
    """How a dataclass-like class gets its __init__."""

    backend: str  # "stdlib" | "pydantic" | "transform"
    init: bool
    kw_only: bool
    extra: str  # "forbid" | "ignore" | "allow": what happens to unknown keywords
    field_specifiers: frozenset[str]


@dataclass
class _Field:
    has_default: bool
    kw_only: bool
    init: bool


class Resolver:
    """Resolves qualified names under `root` to raw parameter lists, parsing modules on demand."""

    def __init__(self, root: Path, packages: tuple[str, ...] = ("vllm",)):
        self.root = root
        self.packages = packages
        self._zip: zipfile.ZipFile | None = None
        self._zip_names: set[str] = set()
        self._zip_dirs: set[str] = set()
        if root.is_file():
            self._zip = zipfile.ZipFile(root)
            self._zip_names = set(self._zip.namelist())
            for name in self._zip_names:
                parts = name.split("/")[:-1]
                self._zip_dirs.update("/".join(parts[:i]) for i in range(1, len(parts) + 1))
        self._modules: dict[str, _Module | None] = {}
        self._classes: dict[int, _Class] = {}
        self._mros: dict[int, _Mro] = {}
        self._active: set[tuple[int, str]] = set()
        self._active_mro: set[int] = set()

    def parsed_modules(self) -> list[str]:
        return sorted(name for name, mod in self._modules.items() if mod is not None)

    def has_package(self, name: str) -> bool:
        return self._read(f"{name}/__init__.py") is not None or self._is_dir(name)

    # -- source access ---------------------------------------------------------------------

    def _read(self, rel: str) -> bytes | None:
        if self._zip is not None:
            return self._zip.read(rel) if rel in self._zip_names else None
        path = self.root / rel
        return path.read_bytes() if path.is_file() else None

    def _is_dir(self, rel: str) -> bool:
        if self._zip is not None:
            return rel in self._zip_dirs
        return (self.root / rel).is_dir()

    def module(self, name: str) -> _Module | None:
        if name in self._modules:
            return self._modules[name]
        found = None
        if name.split(".")[0] in self.packages:
            rel = name.replace(".", "/")
            # A package directory wins over a same-named module file, as in the import system.
            for path, is_package in ((f"{rel}/__init__.py", True), (f"{rel}.py", False)):
                source = self._read(path)
                if source is not None:
                    try:
                        tree = ast.parse(source, filename=path)
                    except (SyntaxError, ValueError) as exc:
                        raise Unknown(f"cannot parse {path}: {exc}") from None
                    found = _Module(name, path, is_package, _Scope.read(tree.body))
                    break
            else:
                if self._is_dir(rel):  # a namespace package: only submodules live in it
                    found = _Module(name, rel + "/", True, _Scope.read([]))
        self._modules[name] = found
        return found

    # -- names -------------------------------------------------------------------------------

    def lookup(self, qualname: str) -> _Obj:
        """The object `qualname` names: the longest module prefix, then attributes."""
        parts = qualname.split(".")
        for i in range(len(parts), 0, -1):
            mod = self.module(".".join(parts[:i]))
            if mod is not None:
                break
        else:
            raise Unknown(f"no module of {qualname!r} under {self.root}")
        obj: _Obj = mod
        for attr in parts[i:]:
            obj = self._getattr(obj, attr)
        return obj

    def _module_obj(self, name: str) -> _Obj:
        if name.split(".")[0] not in self.packages:
            return _Ext(name)
        mod = self.module(name)
        if mod is None:
            raise Unknown(f"no source for module {name} (compiled or missing)")
        return mod

    def _getattr(self, obj: _Obj, attr: str) -> _Obj:
        if isinstance(obj, _Ext):
            return _Ext(f"{obj.qualname}.{attr}")
        if isinstance(obj, _Module):
            return self._module_attr(obj, attr)
        if isinstance(obj, _Class):
            return self._class_attr(obj, attr)
        raise Unknown(f"cannot look up {attr!r} on a function")

    def _module_attr(self, mod: _Module, name: str) -> _Obj:
        found = self._scope_name(mod, mod.scope, name)
        if found is not None:
            return found
        sub = self.module(f"{mod.name}.{name}")
        if sub is not None:
            return sub
        if "__getattr__" in mod.scope.bindings:
            raise Unknown(f"{mod.name}.{name} comes from the module __getattr__ in {mod.path}")
        raise Unknown(f"{mod.path} does not define {name!r}")

    def _scope_name(self, mod: _Module, scope: _Scope, name: str) -> _Obj | None:
        key = (id(scope), name)
        if key in self._active:
            raise Unknown(f"{name!r} in {mod.path} refers back to itself (import or alias cycle)")
        self._active.add(key)
        try:
            return self._scope_name_inner(mod, scope, name)
        finally:
            self._active.discard(key)

    def _scope_name_inner(self, mod: _Module, scope: _Scope, name: str) -> _Obj | None:
        bindings = scope.bindings.get(name)
        # A star import after the last explicit binding may rebind the name at run time.
        last = max((b.line for b in bindings), default=0) if bindings else 0
        for star in scope.star_imports:
            if star.lineno > last and not name.startswith("_"):
                found = self._star_import(mod, star, name)
                if found is not None:
                    if bindings:
                        raise Unknown(
                            f"{name!r} in {mod.path} is bound and also star-imported after"
                        )
                    return found
        if not bindings:
            if name in scope.overloads:
                raise Unknown(
                    f"{name!r} in {mod.path} has only @overload variants, no implementation"
                )
            for star in scope.star_imports:
                if not name.startswith("_"):
                    found = self._star_import(mod, star, name)
                    if found is not None:
                        return found
            return None
        if len(bindings) == 1:
            return self._binding(mod, bindings[0], name)
        # `try: from typing import X / except ImportError: from typing_extensions import X`
        # binds one thing twice; anything else bound twice depends on the run.
        try:
            found_all = [self._binding(mod, b, name) for b in bindings]
        except Unknown:
            found_all = []
        if found_all and all(_same(found_all[0], other) for other in found_all[1:]):
            return found_all[0]
        raise Unknown(f"{name!r} is bound {len(bindings)} times in {mod.path}")

    def _star_import(self, mod: _Module, star: ast.ImportFrom, name: str) -> _Obj | None:
        """What `from base import *` binds to `name`, None if it does not bind it."""
        base = self._absolute(mod, star)
        target = self._module_obj(base)
        if isinstance(target, _Ext):
            raise Unknown(f"{name!r} may come from 'from {base} import *' in {mod.path}")
        exports = target.scope.bindings.get("__all__")
        if not exports:
            return self._scope_name(target, target.scope, name)
        if len(exports) > 1 or exports[0].kind != "assign":
            raise Unknown(f"__all__ of {target.path} is not a plain list")
        if name in _literal(exports[0].node, f"__all__ of {target.path}"):  # type: ignore[operator]
            return self._module_attr(target, name)
        return None

    def _binding(self, mod: _Module, binding: _Binding, name: str) -> _Obj:
        node = binding.node
        if binding.kind == "import":
            assert isinstance(node, ast.alias)
            return self._module_obj(node.name if node.asname else node.name.split(".")[0])
        if binding.kind == "from":
            assert isinstance(node, ast.alias) and isinstance(binding.stmt, ast.ImportFrom)
            base = self._absolute(mod, binding.stmt)
            target = self._module_obj(base)
            if isinstance(target, _Ext):
                return _Ext(f"{base}.{node.name}")
            return self._module_attr(target, node.name)
        if binding.kind == "def":
            if isinstance(node, ast.ClassDef):
                return self._class(mod, node)
            assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            return _Func(mod, node)
        if binding.kind == "assign":
            assert isinstance(node, ast.expr)
            if isinstance(node, (ast.Name, ast.Attribute)):
                return self.expr(mod, node)
            raise Unknown(f"{name!r} in {mod.path} is assigned from {ast.unparse(node)}")
        raise Unknown(
            f"{name!r} in {mod.path} is bound by something other than an import, def or assignment"
        )

    def _absolute(self, mod: _Module, stmt: ast.ImportFrom) -> str:
        if not stmt.level:
            return stmt.module or ""
        package = mod.name if mod.is_package else mod.name.rpartition(".")[0]
        parts = package.split(".")
        if stmt.level - 1 >= len(parts):
            raise Unknown(f"relative import beyond the top package in {mod.path}")
        base = ".".join(parts[: len(parts) - (stmt.level - 1)])
        return f"{base}.{stmt.module}" if stmt.module else base

    def expr(self, mod: _Module, expr: ast.expr) -> _Obj:
        """What a Name/Attribute chain evaluates to in the module's global scope."""
        if isinstance(expr, ast.Name):
            found = self._scope_name(mod, mod.scope, expr.id)
            if found is not None:
                return found
            if "__getattr__" in mod.scope.bindings or not hasattr(builtins, expr.id):
                raise Unknown(f"name {expr.id!r} is not defined in {mod.path}")
            return _Ext(f"builtins.{expr.id}")
        if isinstance(expr, ast.Attribute):
            return self._getattr(self.expr(mod, expr.value), expr.attr)
        raise Unknown(f"cannot evaluate {ast.unparse(expr)} in {mod.path} statically")

    def _qual(self, mod: _Module, expr: ast.expr) -> str | None:
        """The external qualname `expr` names, None for one of ours; Unknown if unresolvable."""
        obj = self.expr(mod, expr)
        return obj.qualname if isinstance(obj, _Ext) else None

    # -- functions ---------------------------------------------------------------------------

    def signature(self, qualname: str) -> tuple[list[RawParam], str]:
        obj = self.lookup(qualname)
        if isinstance(obj, _Func):
            params = self._func_params(obj, bound=False, method=isinstance(obj, _Method))
            return params, f"{obj.module.path}:{obj.node.lineno}"
        if isinstance(obj, _Class):
            return self._class_signature(obj)
        if isinstance(obj, _Module):
            raise Unknown(f"{qualname} is a module")
        raise Unknown(f"{qualname} resolves to {obj.qualname}, outside the parsed source")

    def _func_params(self, func: _Func, bound: bool, method: bool = False) -> list[RawParam]:
        """Parameters as called; `bound` drops self/cls, `method` says it was found on a class."""
        how = "function"
        for dec in func.node.decorator_list:
            try:
                qual = self._qual(func.module, dec.func if isinstance(dec, ast.Call) else dec)
            except Unknown as exc:
                raise Unknown(f"decorator @{ast.unparse(dec)} on {func.node.name}: {exc}") from None
            if qual not in _PLAIN_FUNC_DECORATORS:
                raise Unknown(
                    f"decorator @{ast.unparse(dec)} on {func.node.name} may change its signature"
                )
            if qual in ("builtins.staticmethod", "builtins.classmethod"):
                how = qual.rpartition(".")[2]
        params = _arguments(func.node.args)
        if (how == "classmethod" and method) or bound:
            if bound and how != "function":
                raise Unknown(f"{func.node.name} is a {how}")
            if params and params[0][1] in (POS_ONLY, POS_OR_KW):
                params = params[1:]
            elif not params or params[0][1] != VAR_POS:
                raise Unknown(f"{func.node.name} takes no self/cls parameter")
        return params

    # -- classes -----------------------------------------------------------------------------

    def _class(self, mod: _Module, node: ast.ClassDef) -> _Class:
        cls = self._classes.get(id(node))
        if cls is None:
            cls = self._classes[id(node)] = _Class(mod, node, _Scope.read(node.body))
        return cls

    def _class_attr(self, cls: _Class, name: str) -> _Obj:
        for entry in self.mro(cls):
            if isinstance(entry, str):
                continue
            bindings = entry.scope.bindings.get(name)
            if not bindings:
                if name in entry.scope.overloads:
                    raise Unknown(f"{entry.label}.{name} has only @overload variants")
                continue
            if len(bindings) > 1:
                raise Unknown(
                    f"{entry.label}.{name} is bound {len(bindings)} times (a property or redefined)"
                )
            node = bindings[0].node
            if isinstance(node, ast.ClassDef):
                return self._class(entry.module, node)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                return _Method(entry.module, node)
            raise Unknown(f"{entry.label}.{name} is not a def")
        raise Unknown(f"{cls.label} has no attribute {name!r} in the source")

    def _base(self, cls: _Class, expr: ast.expr) -> _Class | str:
        target = expr.value if isinstance(expr, ast.Subscript) else expr  # Generic[T], Base[T]
        try:
            obj = self.expr(cls.module, target)
        except Unknown as exc:
            raise Unknown(f"base {ast.unparse(expr)} of {cls.label}: {exc}") from None
        if isinstance(obj, _Class):
            return obj
        if isinstance(obj, _Ext) and (
            obj.qualname in _TRANSPARENT_BASES or obj.qualname == _STRUCT
        ):
            return obj.qualname
        what = obj.qualname if isinstance(obj, _Ext) else type(obj).__name__.strip("_").lower()
        raise Unknown(
            f"base {ast.unparse(expr)} of {cls.label} is {what}, whose constructor is not known"
        )

    def mro(self, cls: _Class) -> _Mro:
        key = id(cls.node)
        if key in self._mros:
            return self._mros[key]
        if key in self._active_mro:
            raise Unknown(f"{cls.label} inherits from itself")
        self._active_mro.add(key)
        try:
            for kw in cls.node.keywords:
                if kw.arg == "metaclass":
                    meta = self._qual(cls.module, kw.value)
                    if meta not in _PLAIN_METACLASSES:
                        raise Unknown(
                            f"metaclass {ast.unparse(kw.value)} of {cls.label} may define __call__"
                        )
                elif kw.arg is None:
                    raise Unknown(f"class keywords of {cls.label} are not static")
            if any(isinstance(b, ast.Starred) for b in cls.node.bases):
                raise Unknown(f"bases of {cls.label} are not static")
            bases = [self._base(cls, b) for b in cls.node.bases] or ["builtins.object"]
            seqs = [self.mro(b) if isinstance(b, _Class) else _external_mro(b) for b in bases]
            result = _c3([cls], seqs + [list(bases)], cls.label)
        finally:
            self._active_mro.discard(key)
        self._mros[key] = result
        return result

    def _class_signature(self, cls: _Class) -> tuple[list[RawParam], str]:
        mro = self.mro(cls)
        if _STRUCT in mro:
            return self._struct_params(cls, mro), cls.origin
        init: tuple[list[RawParam], str] | None = None
        new: tuple[list[RawParam], str] | None = None
        for entry in mro:
            if isinstance(entry, str):
                continue
            spec = self._dataclass_spec(entry)
            own_init = entry.scope.bindings.get("__init__")
            if init is None and spec is not None and spec.backend == "pydantic" and own_init:
                # pydantic replaces any __init__ of the class with its validating one.
                raise Unknown(f"pydantic dataclass {entry.label} defines __init__")
            if init is None:
                if spec is not None and (spec.init or spec.backend == "pydantic") and not own_init:
                    init = self._dataclass_params(entry, spec), entry.origin
                elif own_init or "__init__" in entry.scope.overloads:
                    init = self._special(entry, "__init__")
            if new is None and (
                "__new__" in entry.scope.bindings or "__new__" in entry.scope.overloads
            ):
                new = self._special(entry, "__new__")
        if init is not None and new is not None:
            if _passthrough(new[0]):
                return init
            if _passthrough(init[0]):
                return new
            raise Unknown(f"both __new__ and __init__ of {cls.label} take parameters")
        return init or new or ([], cls.origin)

    def _special(self, cls: _Class, name: str) -> tuple[list[RawParam], str]:
        obj = self._class_attr(cls, name)
        if not isinstance(obj, _Func):
            raise Unknown(f"{cls.label}.{name} is not a def")
        return self._func_params(obj, bound=True), f"{obj.module.path}:{obj.node.lineno}"

    def _decorator_target(self, cls: _Class, dec: ast.expr) -> _Obj:
        try:
            return self.expr(cls.module, dec.func if isinstance(dec, ast.Call) else dec)
        except Unknown as exc:
            raise Unknown(f"class decorator @{ast.unparse(dec)} on {cls.label}: {exc}") from None

    def _dataclass_spec(self, cls: _Class) -> _Spec | None:
        """How the class decorators generate __init__, None if they do not."""
        specs = []
        for dec in cls.node.decorator_list:
            obj = self._decorator_target(cls, dec)
            qual = obj.qualname if isinstance(obj, _Ext) else None
            if qual in _PLAIN_CLASS_DECORATORS:
                continue
            kwargs = _call_kwargs(dec, f"@{ast.unparse(dec)}")
            if qual == _STDLIB_DATACLASS:
                specs.append(
                    _Spec(
                        "stdlib",
                        _flag(kwargs, "init", True),
                        _flag(kwargs, "kw_only", False),
                        "forbid",
                        frozenset({_STDLIB_FIELD}),
                    )
                )
            elif qual == _PYDANTIC_DATACLASS:
                specs.append(self._pydantic_spec(kwargs, "ignore", frozenset(), cls))
            elif isinstance(obj, _Func) and (transform := self._transform(obj)) is not None:
                kw_default, fields, backend, extra = transform
                if backend == "pydantic":
                    specs.append(self._pydantic_spec(kwargs, extra, fields, cls, kw_default))
                else:
                    specs.append(
                        _Spec(
                            backend,
                            _flag(kwargs, "init", True),
                            _flag(kwargs, "kw_only", kw_default),
                            "forbid",
                            fields | ({_STDLIB_FIELD} if backend == "stdlib" else set()),
                        )
                    )
            else:
                raise Unknown(
                    f"class decorator @{ast.unparse(dec)} on {cls.label} may replace the class"
                )
        if len(specs) > 1:
            raise Unknown(f"{cls.label} has more than one dataclass decorator")
        return specs[0] if specs else None

    def _pydantic_spec(
        self,
        kwargs: dict[str, ast.expr],
        extra: str,
        fields: frozenset[str],
        cls: _Class,
        kw_default: bool = False,
    ) -> _Spec:
        config = kwargs.get("config")
        if config is not None:
            extra = self._config_extra(cls.module, config, extra) or extra
        return _Spec(
            "pydantic",
            True,
            _flag(kwargs, "kw_only", kw_default),
            extra,
            fields | {_STDLIB_FIELD} | _PYDANTIC_FIELD,
        )

    def _config_extra(self, mod: _Module, config: ast.expr, default: str | None) -> str | None:
        """The `extra` setting a pydantic config literal gives (ConfigDict(...) or {...})."""
        items: dict[str, ast.expr]
        if isinstance(config, ast.Call) and self._qual(mod, config.func) in _CONFIG_DICT:
            items = _call_kwargs(config, ast.unparse(config))
        elif isinstance(config, ast.Dict) and all(isinstance(k, ast.Constant) for k in config.keys):
            keys = [k.value for k in config.keys]  # type: ignore[union-attr]
            items = dict(zip(keys, config.values))
        else:
            raise Unknown(f"pydantic config {ast.unparse(config)} is not a literal")
        if "extra" not in items:
            return default
        value = _literal(items["extra"], "pydantic extra")
        if value not in ("forbid", "ignore", "allow"):
            raise Unknown(f"pydantic extra={value!r} is not understood")
        return str(value)

    def _transform(self, func: _Func) -> tuple[bool, frozenset[str], str, str] | None:
        """For a PEP 681 decorator: (kw_only_default, field specifiers, backend, pydantic extra)."""
        for dec in func.node.decorator_list:
            if (
                self._qual(func.module, dec.func if isinstance(dec, ast.Call) else dec)
                in _DATACLASS_TRANSFORM
            ):
                break
        else:
            return None
        kwargs = _call_kwargs(dec, "@dataclass_transform") if isinstance(dec, ast.Call) else {}
        kw_default = _flag(kwargs, "kw_only_default", False)
        fields: set[str] = set()
        spec_expr = kwargs.get("field_specifiers")
        if spec_expr is not None:
            if not isinstance(spec_expr, (ast.Tuple, ast.List)):
                raise Unknown("field_specifiers is not a literal tuple")
            for elt in spec_expr.elts:
                fields.add(self._key(self.expr(func.module, elt)))
        # What the decorator body really calls decides the runtime behaviour (vLLM's @config
        # wraps pydantic.dataclasses.dataclass with extra="forbid").
        backends, extras = set(), set()
        for node in ast.walk(func.node):
            if isinstance(node, ast.Call) and _dotted(node.func) is not None:
                try:
                    qual = self._qual(func.module, node.func)
                except Unknown:
                    continue
                if qual == _PYDANTIC_DATACLASS:
                    backends.add("pydantic")
                elif qual == _STDLIB_DATACLASS:
                    backends.add("stdlib")
                elif qual in _CONFIG_DICT:
                    extra = self._config_extra(func.module, node, None)
                    if extra is not None:
                        extras.add(extra)
        backend = backends.pop() if len(backends) == 1 else "transform"
        if len(extras) > 1:
            raise Unknown(f"{func.node.name} sets more than one pydantic extra policy")
        return kw_default, frozenset(fields), backend, extras.pop() if extras else "ignore"

    def _key(self, obj: _Obj) -> str:
        if isinstance(obj, _Ext):
            return obj.qualname
        if isinstance(obj, (_Func, _Class)):
            return f"{obj.module.name}.{obj.node.name}"
        raise Unknown("field specifier is a module")

    def _fields(self, cls: _Class, spec: _Spec) -> dict[str, _Field]:
        if cls.scope.nested_annotations:
            raise Unknown(f"{cls.label} annotates names inside if/try/with blocks")
        fields: dict[str, _Field] = {}
        for base in reversed(self.mro(cls)[1:]):
            if isinstance(base, _Class):
                base_spec = self._dataclass_spec(base)
                if base_spec is not None:
                    fields.update(self._fields(base, base_spec))
        kw_only = spec.kw_only
        for stmt in cls.node.body:
            if not isinstance(stmt, ast.AnnAssign) or not isinstance(stmt.target, ast.Name):
                continue
            kind = self._annotation_kind(cls.module, stmt.annotation)
            if kind == "classvar":
                continue
            if kind == "kw_only":
                kw_only = True
                continue
            if spec.backend == "pydantic" and self._annotated_field(cls.module, stmt.annotation):
                # pydantic reads defaults from Annotated[T, Field(default=...)] too.
                raise Unknown(
                    f"{cls.label}.{stmt.target.id} has a Field(...) inside Annotated[...]"
                )
            fields[stmt.target.id] = self._field(
                cls.module, stmt.value, kw_only, spec.field_specifiers
            )
        return fields

    def _annotated_field(self, mod: _Module, ann: ast.expr) -> bool:
        if not isinstance(ann, ast.Subscript) or not isinstance(ann.slice, ast.Tuple):
            return False
        try:
            if self._qual(mod, ann.value) not in _ANNOTATED:
                return False
        except Unknown:
            return False
        for meta in ann.slice.elts[1:]:
            if isinstance(meta, ast.Call) and _dotted(meta.func) is not None:
                try:
                    if self._qual(mod, meta.func) in _PYDANTIC_FIELD:
                        return True
                except Unknown:
                    return True  # cannot rule it out
        return False

    def _dataclass_params(self, cls: _Class, spec: _Spec) -> list[RawParam]:
        fields = self._fields(cls, spec)
        params = _order_fields(fields, cls.label)
        if spec.extra == "allow":
            params.append(("extra_data", VAR_KW, False))
        elif spec.extra == "ignore":
            # pydantic drops unknown keywords silently: passing one never fails.
            params.append(("ignored_extra", VAR_KW, False))
        return params

    def _annotation_kind(self, mod: _Module, ann: ast.expr) -> str:
        if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
            try:
                ann = ast.parse(ann.value, mode="eval").body
            except SyntaxError:
                return "field"
        head = ann.value if isinstance(ann, ast.Subscript) else ann
        name = _dotted(head)
        if name is None:
            return "field"
        try:
            qual = self._qual(mod, head)
        except Unknown:
            if name.rpartition(".")[2] in ("ClassVar", "KW_ONLY"):
                raise Unknown(
                    f"cannot tell whether {name} in {mod.path} is {name.rpartition('.')[2]}"
                ) from None
            return "field"
        if qual in _CLASSVAR:
            return "classvar"
        if qual == _KW_ONLY_SENTINEL:
            return "kw_only"
        return "field"

    def _field(
        self, mod: _Module, value: ast.expr | None, kw_only: bool, specifiers: frozenset[str]
    ) -> _Field:
        if value is None:
            return _Field(False, kw_only, True)
        if not isinstance(value, ast.Call) or _dotted(value.func) is None:
            return _Field(True, kw_only, True)
        try:
            key = self._key(self.expr(mod, value.func))
        except Unknown:
            key = None
        if key not in specifiers:
            return _Field(True, kw_only, True)  # any other call is just the default value
        kwargs = _call_kwargs(value, ast.unparse(value))
        if "alias" in kwargs or "validation_alias" in kwargs:
            raise Unknown(f"{ast.unparse(value)} renames the constructor keyword")
        has_default = "default_factory" in kwargs or "factory" in kwargs
        if key in _PYDANTIC_FIELD and value.args:
            default: ast.expr | None = value.args[0]
        elif value.args:
            raise Unknown(f"positional arguments in {ast.unparse(value)}")
        else:
            default = kwargs.get("default")
        # pydantic's Field(...) marks a required field.
        required_marker = (
            key in _PYDANTIC_FIELD and isinstance(default, ast.Constant) and default.value is ...
        )
        if default is not None and not required_marker:
            has_default = True
        return _Field(has_default, _flag(kwargs, "kw_only", kw_only), _flag(kwargs, "init", True))

    def _struct_params(self, cls: _Class, mro: _Mro) -> list[RawParam]:
        """msgspec.Struct: the fields of the Struct classes in the MRO (no own __init__/__new__)."""
        fields: dict[str, _Field] = {}
        for entry in reversed(mro):
            if isinstance(entry, str):
                continue
            for special in ("__init__", "__new__"):
                if special in entry.scope.bindings:
                    raise Unknown(f"{entry.label} defines {special} next to msgspec.Struct")
            if self._dataclass_spec(entry) is not None:
                raise Unknown(f"{entry.label} is a dataclass and a msgspec.Struct")
            is_struct = _STRUCT in self.mro(entry)
            kwargs = {kw.arg: kw.value for kw in entry.node.keywords if kw.arg}
            kw_only = bool(_literal(kwargs["kw_only"], "kw_only")) if "kw_only" in kwargs else False
            if entry.scope.nested_annotations:
                raise Unknown(f"{entry.label} annotates names inside if/try/with blocks")
            for stmt in entry.node.body:
                if not isinstance(stmt, ast.AnnAssign) or not isinstance(stmt.target, ast.Name):
                    continue
                if not is_struct:
                    raise Unknown(f"mixin {entry.label} of a msgspec.Struct has annotations")
                if self._annotation_kind(entry.module, stmt.annotation) == "classvar":
                    continue
                fields[stmt.target.id] = self._field(
                    entry.module, stmt.value, kw_only, frozenset({_MSGSPEC_FIELD})
                )
        return _order_fields(fields, cls.label)


@dataclass(eq=False)
class _Method(_Func):
    """A def found as a class attribute (keeps self unless it is a classmethod)."""


def _same(a: _Obj, b: _Obj) -> bool:
    if isinstance(a, _Ext) and isinstance(b, _Ext):
        return _canonical(a.qualname) == _canonical(b.qualname)
    if isinstance(a, (_Func, _Class)) and isinstance(b, (_Func, _Class)):
        return a.node is b.node
    return a is b


def _canonical(qualname: str) -> str:
    # typing_extensions re-exports typing's objects on the Pythons that have them.
    head, _, rest = qualname.partition(".")
    return f"typing.{rest}" if head == "typing_extensions" else qualname


def _arguments(args: ast.arguments) -> list[RawParam]:
    positional = [(a, POS_ONLY) for a in args.posonlyargs] + [(a, POS_OR_KW) for a in args.args]
    first_default = len(positional) - len(args.defaults)
    params: list[RawParam] = [
        (arg.arg, kind, i < first_default) for i, (arg, kind) in enumerate(positional)
    ]
    if args.vararg is not None:
        params.append((args.vararg.arg, VAR_POS, False))
    for arg, default in zip(args.kwonlyargs, args.kw_defaults):
        params.append((arg.arg, KW_ONLY, default is None))
    if args.kwarg is not None:
        params.append((args.kwarg.arg, VAR_KW, False))
    return params


def _passthrough(params: list[RawParam]) -> bool:
    return [kind for _, kind, _ in params] == [VAR_POS, VAR_KW]


def _order_fields(fields: dict[str, _Field], label: str) -> list[RawParam]:
    """Generated __init__ order: positional fields, then keyword-only ones, each in field order."""
    params: list[RawParam] = []
    seen_default = False
    for name, f in fields.items():
        if f.init and not f.kw_only:
            if seen_default and not f.has_default:
                raise Unknown(f"{label}: required field {name!r} follows a field with a default")
            seen_default = seen_default or f.has_default
            params.append((name, POS_OR_KW, not f.has_default))
    params += [
        (name, KW_ONLY, not f.has_default) for name, f in fields.items() if f.init and f.kw_only
    ]
    return params


def _call_kwargs(node: ast.expr, what: str) -> dict[str, ast.expr]:
    if not isinstance(node, ast.Call):
        return {}
    if any(kw.arg is None for kw in node.keywords) or any(
        isinstance(a, ast.Starred) for a in node.args
    ):
        raise Unknown(f"{what} passes **/* arguments")
    return {kw.arg: kw.value for kw in node.keywords if kw.arg is not None}


def _flag(kwargs: dict[str, ast.expr], name: str, default: bool) -> bool:
    if name not in kwargs:
        return default
    value = _literal(kwargs[name], name)
    if not isinstance(value, bool):
        raise Unknown(f"{name}={value!r} is not a bool literal")
    return value


def _external_mro(qualname: str) -> _Mro:
    return [qualname] if qualname == "builtins.object" else [qualname, "builtins.object"]


def _c3(head: _Mro, seqs: list[_Mro], label: str) -> _Mro:
    result = list(head)
    seqs = [list(s) for s in seqs if s]
    while seqs:
        for seq in seqs:
            candidate = seq[0]
            if not any(candidate in s[1:] for s in seqs):
                break
        else:
            raise Unknown(f"no consistent MRO for {label}")
        result.append(candidate)
        seqs = [s[1:] if s[0] is candidate or s[0] == candidate else s for s in seqs]
        seqs = [s for s in seqs if s]
    return result

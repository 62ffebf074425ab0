"""Name resolution over parsed source, the way the import system and attribute lookup would do
it at run time: locating and caching modules (a directory or a wheel), imports, re-exports and
star imports, scope bindings, attribute chains, and class attributes along the MRO. Every other
layer asks here what a name means, so modules are parsed lazily and each one once."""

from __future__ import annotations

import ast
import builtins
import gc
from pathlib import Path
from typing import Any, TypeVar

from vllm_shim_patch.vllm_source import LISTING, Stamp, VllmSource, listing, resolve_relative, stamp

from vllm_shim_patch.signatures.static.lazy import lazy_export
from vllm_shim_patch.signatures.static.scope import (
    AttrMro,
    Binding,
    Class,
    Ext,
    Func,
    Method,
    Missing,
    Module,
    Mro,
    Obj,
    Scope,
    Unknown,
    Unresolved,
    literal,
)

__all__ = ["INIT_ONLY_BASES", "NAMEDTUPLES", "STRUCT", "LISTING", "Names", "Stamp", "listing", "stamp"]

# External bases whose constructor is object's: they add no __init__ or __new__.
_TRANSPARENT_BASES = frozenset(
    {
        "builtins.object",
        "abc.ABC",
        "typing.Generic",
        "typing_extensions.Generic",
    }
)
# msgspec writes the constructor of a Struct subclass from its fields (see ctors.py).
STRUCT = "msgspec.Struct"
# typing.NamedTuple writes `__new__` from the fields of the class that names it as a base.
NAMEDTUPLES = frozenset({"typing.NamedTuple", "typing_extensions.NamedTuple"})
# Outside bases whose metaclass is `type` and whose `__new__` takes any arguments and passes them
# on: a subclass is constructed by the first `__init__` in its MRO. Known only when the source
# defines that `__init__` (a vLLM layer over torch's Module, an exception with its own __init__).
_EXCEPTIONS = ("BaseException", "Exception", "ValueError", "RuntimeError", "TypeError",
               "KeyError", "IndexError", "LookupError", "AttributeError", "NotImplementedError",
               "AssertionError")
INIT_ONLY_BASES = frozenset(
    {"torch.nn.Module", "torch.nn.modules.module.Module", *(f"builtins.{e}" for e in _EXCEPTIONS)}
)
_PLAIN_METACLASSES = frozenset({"abc.ABCMeta", "builtins.type"})


class Names:
    """Resolves qualified names and expressions under `root`, parsing modules on demand."""

    def __init__(self, root: Path, packages: tuple[str, ...] = ("vllm",)):
        self.root = root
        self.packages = packages
        # The one open handle on the source (a wheel's zip), for every check built on these modules.
        self.source = VllmSource(root)
        self._modules: dict[str, Module | None] = {}
        # Every path of a source directory looked at, with what it was then: the signature cache
        # is valid while each still stats the same (absent paths included: a new file can shadow).
        self.accessed: dict[str, Stamp | None] = {}
        # A weak reference to the reader that owns these modules (static/__init__.py), when it
        # keeps answers on disk: checks built on these modules (static/members.py) keep theirs
        # beside its own.
        self.memo: Any = None
        self._classes: dict[int, Class] = {}
        self._mros: dict[int, Mro] = {}
        self._attr_mros: dict[int, AttrMro] = {}
        self._bases: dict[int, list[Class | str | Unresolved]] = {}
        self._active_attr_mro: set[int] = set()
        self._active: set[tuple[int, str]] = set()
        self._active_mro: set[int] = set()

    def parsed_modules(self) -> list[str]:
        return sorted(name for name, mod in self._modules.items() if mod is not None)

    def has_package(self, name: str) -> bool:
        return self._read(f"{name}/__init__.py") is not None or self._is_dir(name)

    # -- source access ---------------------------------------------------------------------

    def close(self) -> None:
        self.source.close()

    def _read(self, rel: str) -> bytes | None:
        data, seen = self.source.read_stamped(rel)
        if not self.source.is_wheel:
            self.accessed[rel] = seen
        return data

    def _is_dir(self, rel: str) -> bool:
        found, seen = self.source.is_dir(rel)
        if not self.source.is_wheel:
            self.accessed[rel + "/"] = seen
        return found

    def module(self, name: str) -> Module | None:
        if name in self._modules:
            return self._modules[name]
        found = None
        if name.split(".")[0] in self.packages:
            rel = name.replace(".", "/")
            # A package directory wins over a same-named module file, as in the import system.
            for path, is_package in ((f"{rel}/__init__.py", True), (f"{rel}.py", False)):
                source = self._read(path)
                if source is not None:
                    found = _read_module(name, path, is_package, source)
                    break
            else:
                if self._is_dir(rel):  # a namespace package: only submodules live in it
                    found = Module(name, rel + "/", True, Scope.read([]))
        self._modules[name] = found
        return found

    # -- names -------------------------------------------------------------------------------

    def lookup(self, qualname: str) -> Obj:
        """The object `qualname` names: the longest module prefix, then attributes."""
        parts = qualname.split(".")
        for i in range(len(parts), 0, -1):
            mod = self.module(".".join(parts[:i]))
            if mod is not None:
                break
        else:
            raise Unknown(f"no module of {qualname!r} under {self.root}")
        obj: Obj = mod
        for attr in parts[i:]:
            obj = self._getattr(obj, attr)
        return obj

    def _module_obj(self, name: str) -> Module | Ext:
        if name.split(".")[0] not in self.packages:
            return Ext(name)
        mod = self.module(name)
        if mod is None:
            raise Unknown(f"no source for module {name} (compiled or missing)")
        return mod

    def _getattr(self, obj: Obj, attr: str) -> Obj:
        if isinstance(obj, Ext):
            return Ext(f"{obj.qualname}.{attr}")
        if isinstance(obj, Module):
            return self._module_attr(obj, attr)
        if isinstance(obj, Class):
            return self.class_attr(obj, attr)
        raise Unknown(f"cannot look up {attr!r} on a function")

    def _module_attr(self, mod: Module, name: str) -> Obj:
        found = self._scope_name(mod, mod.scope, name)
        if found is not None:
            return found
        sub = self.module(f"{mod.name}.{name}")
        if sub is not None:
            return sub
        if "__getattr__" in mod.scope.bindings:
            return self._lazy(mod, name)
        # A star import from outside the parsed packages raised Unknown in _scope_name already.
        raise Missing(f"{mod.path} does not define {name!r}")

    def _lazy(self, mod: Module, name: str) -> Obj:
        bindings = mod.scope.bindings["__getattr__"]
        where = f"{mod.name}.{name} comes from the module __getattr__ in {mod.path}"
        node = bindings[0].node
        if len(bindings) != 1 or not isinstance(node, ast.FunctionDef) or node.decorator_list:
            raise Unknown(f"{where}, which is not one plain def")
        key = (id(node), name)
        if key in self._active:
            raise Unknown(f"{where}, which asks for {name!r} again")
        self._active.add(key)
        try:
            return lazy_export(self, mod, node, name)
        except Missing:
            raise
        except Unknown as exc:
            raise Unknown(f"{where}: {exc}") from None
        finally:
            self._active.discard(key)

    def _scope_name(self, mod: Module, scope: Scope, name: str) -> Obj | None:
        key = (id(scope), name)
        if key in self._active:
            raise Unknown(f"{name!r} in {mod.path} refers back to itself (import or alias cycle)")
        self._active.add(key)
        try:
            return self._scope_name_inner(mod, scope, name)
        finally:
            self._active.discard(key)

    def _scope_name_inner(self, mod: Module, scope: Scope, name: str) -> Obj | None:
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

    def _star_import(self, mod: Module, star: ast.ImportFrom, name: str) -> Obj | None:
        """What `from base import *` binds to `name`, None if it does not bind it."""
        base = self._absolute(mod, star)
        target = self._module_obj(base)
        if isinstance(target, Ext):
            raise Unknown(f"{name!r} may come from 'from {base} import *' in {mod.path}")
        exports = target.scope.bindings.get("__all__")
        if not exports:
            return self._scope_name(target, target.scope, name)
        if len(exports) > 1 or exports[0].kind != "assign":
            raise Unknown(f"__all__ of {target.path} is not a plain list")
        if name in literal(exports[0].node, f"__all__ of {target.path}"):  # type: ignore[operator]
            return self._module_attr(target, name)
        return None

    def _binding(self, mod: Module, binding: Binding, name: str) -> Obj:
        node = binding.node
        if binding.kind == "import":
            assert isinstance(node, ast.alias)
            return self._module_obj(node.name if node.asname else node.name.split(".")[0])
        if binding.kind == "from":
            assert isinstance(node, ast.alias) and isinstance(binding.stmt, ast.ImportFrom)
            base = self._absolute(mod, binding.stmt)
            target = self._module_obj(base)
            if isinstance(target, Ext):
                return Ext(f"{base}.{node.name}")
            return self._module_attr(target, node.name)
        if binding.kind == "def":
            if isinstance(node, ast.ClassDef):
                return self._class(mod, node)
            assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            return Func(mod, node)
        if binding.kind == "assign":
            assert isinstance(node, ast.expr)
            if isinstance(node, (ast.Name, ast.Attribute)):
                return self.expr(mod, node)
            raise Unknown(f"{name!r} in {mod.path} is assigned from {ast.unparse(node)}")
        raise Unknown(
            f"{name!r} in {mod.path} is bound by something other than an import, def or assignment"
        )

    def _absolute(self, mod: Module, stmt: ast.ImportFrom) -> str:
        package = mod.name if mod.is_package else mod.name.rpartition(".")[0]
        found = resolve_relative(package, stmt.level, stmt.module)
        if found is None:
            raise Unknown(f"relative import beyond the top package in {mod.path}")
        return found

    def expr(self, mod: Module, expr: ast.expr) -> Obj:
        """What a Name/Attribute chain evaluates to in the module's global scope."""
        if isinstance(expr, ast.Name):
            found = self._scope_name(mod, mod.scope, expr.id)
            if found is not None:
                return found
            # A module __getattr__ serves attribute access from outside, never a global name.
            if not hasattr(builtins, expr.id):
                raise Unknown(f"name {expr.id!r} is not defined in {mod.path}")
            return Ext(f"builtins.{expr.id}")
        if isinstance(expr, ast.Attribute):
            return self._getattr(self.expr(mod, expr.value), expr.attr)
        raise Unknown(f"cannot evaluate {ast.unparse(expr)} in {mod.path} statically")

    def qual(self, mod: Module, expr: ast.expr) -> str | None:
        """The external qualname `expr` names, None for one of ours; Unknown if unresolvable."""
        obj = self.expr(mod, expr)
        return obj.qualname if isinstance(obj, Ext) else None

    # -- classes -----------------------------------------------------------------------------

    def _class(self, mod: Module, node: ast.ClassDef) -> Class:
        cls = self._classes.get(id(node))
        if cls is None:
            cls = self._classes[id(node)] = Class(mod, node, Scope.read(node.body))
        return cls

    def class_attr(self, cls: Class, name: str) -> Obj:
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
                return Method(entry.module, node)
            raise Unknown(f"{entry.label}.{name} is not a def")
        raise Unknown(f"{cls.label} has no attribute {name!r} in the source")

    def _base(self, cls: Class, expr: ast.expr) -> Class | str:
        target = expr.value if isinstance(expr, ast.Subscript) else expr  # Generic[T], Base[T]
        try:
            obj = self.expr(cls.module, target)
        except Unknown as exc:
            raise Unknown(f"base {ast.unparse(expr)} of {cls.label}: {exc}") from None
        if isinstance(obj, Class):
            return obj
        if isinstance(obj, Ext) and (
            obj.qualname in _TRANSPARENT_BASES or obj.qualname == STRUCT or obj.qualname in NAMEDTUPLES
            or obj.qualname in INIT_ONLY_BASES
        ):
            return obj.qualname
        what = obj.qualname if isinstance(obj, Ext) else type(obj).__name__.lower()
        raise Unknown(
            f"base {ast.unparse(expr)} of {cls.label} is {what}, whose constructor is not known"
        )

    def mro(self, cls: Class) -> Mro:
        key = id(cls.node)
        if key in self._mros:
            return self._mros[key]
        if key in self._active_mro:
            raise Unknown(f"{cls.label} inherits from itself")
        self._active_mro.add(key)
        try:
            for kw in cls.node.keywords:
                if kw.arg == "metaclass":
                    meta = self.qual(cls.module, kw.value)
                    if meta not in _PLAIN_METACLASSES:
                        raise Unknown(
                            f"metaclass {ast.unparse(kw.value)} of {cls.label} may define __call__"
                        )
                elif kw.arg is None:
                    raise Unknown(f"class keywords of {cls.label} are not static")
            if any(isinstance(b, ast.Starred) for b in cls.node.bases):
                raise Unknown(f"bases of {cls.label} are not static")
            bases = [self._base(cls, b) for b in cls.node.bases] or ["builtins.object"]
            seqs = [self.mro(b) if isinstance(b, Class) else _external_mro(b) for b in bases]
            head: Mro = [cls]
            result = _c3(head, [*seqs, list(bases)], cls.label)
        finally:
            self._active_mro.discard(key)
        self._mros[key] = result
        return result

    def bases(self, cls: Class) -> list[Class | str | Unresolved]:
        """The bases of `cls` as attribute lookup sees them: a class of the source, an external
        base's qualname, or why a base is not known."""
        key = id(cls.node)
        if key not in self._bases:
            out: list[Class | str | Unresolved] = []
            for base in cls.node.bases:
                target = base.value if isinstance(base, ast.Subscript) else base
                try:
                    obj = self.expr(cls.module, target)
                except Unknown as exc:
                    out.append(Unresolved(f"base {ast.unparse(base)} of {cls.label}: {exc}"))
                    continue
                if isinstance(obj, Class):
                    out.append(obj)
                elif isinstance(obj, Ext):
                    out.append(obj.qualname)
                else:
                    out.append(Unresolved(f"base {ast.unparse(base)} of {cls.label} is not a class"))
            self._bases[key] = out
        return self._bases[key]

    def attribute_mro(self, cls: Class) -> AttrMro:
        """The C3 linearization attribute lookup walks: `mro`'s, but keeping every base (`mro`
        is the constructor's and refuses a base whose constructor it does not know); a base the
        source does not resolve stands in it as `Unresolved`. Unknown only for a class that
        inherits from itself or has no consistent order."""
        key = id(cls.node)
        if key in self._attr_mros:
            return self._attr_mros[key]
        if key in self._active_attr_mro:
            raise Unknown(f"{cls.label} inherits from itself")
        self._active_attr_mro.add(key)
        try:
            bases = self.bases(cls) or ["builtins.object"]
            seqs: list[AttrMro] = [self.attribute_mro(b) if isinstance(b, Class) else list(_external_mro(b))
                                   if isinstance(b, str) else [b] for b in bases]
            attr_head: AttrMro = [cls]
            result = _c3(attr_head, [*seqs, list(bases)], cls.label)
        finally:
            self._active_attr_mro.discard(key)
        self._attr_mros[key] = result
        return result


def _read_module(name: str, path: str, is_package: bool, source: bytes) -> Module:
    """The module parsed, with the cycle collector paused: its tree is tens of thousands of new
    objects, none of them garbage, and the collections they would trigger (each over every tree
    read before) cost about a third of the time."""
    paused = gc.isenabled()
    gc.disable()
    try:
        try:
            tree = ast.parse(source, filename=path)
        except (SyntaxError, ValueError) as exc:
            raise Unknown(f"cannot parse {path}: {exc}") from None
        return Module(name, path, is_package, Scope.read(tree.body))
    finally:
        if paused:
            gc.enable()




def _same(a: Obj, b: Obj) -> bool:
    if isinstance(a, Ext) and isinstance(b, Ext):
        return _canonical(a.qualname) == _canonical(b.qualname)
    if isinstance(a, (Func, Class)) and isinstance(b, (Func, Class)):
        return a.node is b.node
    return a is b


def _canonical(qualname: str) -> str:
    # typing_extensions re-exports typing's objects on the Pythons that have them.
    head, _, rest = qualname.partition(".")
    return f"typing.{rest}" if head == "typing_extensions" else qualname


def _external_mro(qualname: str) -> Mro:
    if qualname in NAMEDTUPLES:  # the class's real bases are (tuple,)
        return [qualname, "builtins.tuple", "builtins.object"]
    if qualname.startswith("builtins.") and qualname in INIT_ONLY_BASES:
        return [f"builtins.{k.__name__}" for k in getattr(builtins, qualname[9:]).__mro__]
    return [qualname] if qualname == "builtins.object" else [qualname, "builtins.object"]


_Entry = TypeVar("_Entry")


def _c3(head: list[_Entry], seqs: list[list[_Entry]], label: str) -> list[_Entry]:
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

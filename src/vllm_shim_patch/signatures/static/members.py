"""Whether a name exists in vLLM's source, and where a missing one lives now: the one existence
and relocation engine, for the audit (imports, module names, class and instance attributes, enum
members), the guards (`defines`) and verification.

Answers are typed (`Existence`: present, missing, moved with where to, or unknown with the reason
it cannot be told). Missing only when everything that could define the name was read: every
class of the MRO (`Names.attribute_mro`, C3) is in vLLM's source or is a standard-library class
(asked directly), no `__getattr__`, no `setattr`, no decorator that may add attributes. This reads
the static reader's parsed modules (`names.Names`) through the one open source
(`vllm_source.VllmSource`); it adds no parsing of its own except the search for a moved name,
which greps the source only when something is missing.

Answers are kept in the reader's on-disk cache (`StaticSignatures.answers`) beside its
signatures, valid while every path read for them is unchanged: reads go through `Names` (which
records them) or the walk for compiled modules (which records each directory's listing). An
answer that needed a byte search of the whole tree (`search.defined_somewhere`) is not kept, nor is one
built on it: the tree's files are not recorded. The key holds the Python the tool runs on, which
answers for standard-library bases.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import sys
import typing
from dataclasses import replace
from pathlib import Path
from typing import Any

from vllm_shim_patch.signatures.model import Existence, Presence
from vllm_shim_patch.signatures.static.names import NAMEDTUPLES, Names
from vllm_shim_patch.signatures.static.scope import Class, Func, Missing, Module, Unknown, Unresolved
from vllm_shim_patch.signatures.static.search import compiled, defined_somewhere, dynamic_module, relocated
from vllm_shim_patch.vllm_source import resolve_relative, unwrap_annotation

__all__ = ["Members"]

Answer = tuple[bool | None, str]

_MODULE_DUNDERS = frozenset({"__name__", "__file__", "__path__", "__doc__", "__spec__", "__loader__",
                             "__package__", "__dict__", "__all__"})
# Standard-library bases whose instances have no attributes their class does not show.
_NO_INSTANCE_ATTRIBUTES = frozenset({
    "builtins.object", "abc.ABC", "typing.Generic", "typing.Protocol", "typing_extensions.Protocol",
    "enum.Enum", "enum.IntEnum", "enum.StrEnum", "enum.Flag", "enum.IntFlag", "builtins.str", "builtins.int",
    "builtins.float", "builtins.bytes", "builtins.tuple", "typing.NamedTuple",
})
_TYPE_CHECKING = frozenset({"TYPE_CHECKING", "typing.TYPE_CHECKING", "typing_extensions.TYPE_CHECKING"})
# Class decorators that add no public attributes (dataclass-like code generators).
_PLAIN_CLASS_DECORATORS = frozenset({"dataclass", "config", "total_ordering", "final", "runtime_checkable",
                                     "unique", "dataclass_transform"})
# For the guards: outside bases taken to define none of the names vLLM itself renames (torch's
# `nn.Module`, `object`, the typing and abc helpers); any other outside base leaves it unknown.
_GUARD_ROOTS = frozenset({
    "builtins.object", "torch.nn.Module", "torch.nn.modules.module.Module", "typing.Generic",
    "typing.Protocol", "typing_extensions.Protocol", "abc.ABC", "abc.ABCMeta",
})


class Members:
    """Existence and relocation over one `Names` (the static reader's parsed modules): typed
    answers (`Existence`), kept in the reader's on-disk cache when it has one."""

    def __init__(self, names: Names):
        self.names = names
        # This run's answers, each with whether it rests on a whole-tree search (never stored).
        self._memo: dict[str, tuple[Answer, bool]] = {}
        self._untracked = False
        # The reader that keeps answers on disk, held weakly like `names.memo`: it holds this
        # object (`StaticSignatures.members`), and a cycle would keep every parsed module alive
        # until the collector runs at exit.
        self._store = getattr(names, "memo", None)
        memo = self._store() if self._store is not None else None
        self._table = memo.answers("members", _version()) if memo is not None else None
        self._dirty = False
        self._moved: dict[str, list[str]] = {}

    def save(self) -> None:
        """Keep this run's new answers on disk (once, after the checks)."""
        memo = self._store() if self._store is not None else None
        if self._dirty and memo is not None:
            memo.save_answers()
            self._dirty = False

    def _cached(self, key: str, compute: Any) -> Answer:
        if key in self._memo:
            answer, untracked = self._memo[key]
            self._untracked = self._untracked or untracked
            return answer
        table = self._table
        if table is not None:
            entry = table.get(key)
            if (isinstance(entry, list) and len(entry) == 2 and (entry[0] is None or isinstance(entry[0], bool))
                    and isinstance(entry[1], str)):
                answer = (entry[0], entry[1])
                self._memo[key] = (answer, False)
                return answer
        outer, self._untracked = self._untracked, False
        try:
            answer = compute()
        finally:
            untracked, self._untracked = self._untracked, outer or self._untracked
        self._memo[key] = (answer, untracked)
        if table is not None and not untracked:
            table[key] = list(answer)
            self._dirty = True
        return answer

    # -- modules and names ---------------------------------------------------------------

    def module_exists(self, name: str) -> bool | None:
        """True, False, or None for a module that may be compiled (an extension such as vllm._C)
        in a source that holds no compiled files (the `.py` files of a wheel)."""
        try:
            if self.names.module(name) is not None:
                return True
        except Unknown:
            return True  # present but unparsable: not our finding
        found, walked = compiled(self.names.source, name)
        self.names.accessed.update(walked)
        return found

    def exists(self, qualname: str, on_instance: bool = False, declared: bool = False) -> Existence:
        """Whether `a.b.C.attr` (an attribute of module/class `a.b.C`) exists; `on_instance`: read
        on an instance of `a.b.C` (its `self.x` count).

        `declared`: the instance is only annotated as `C` (or returned by a function annotated
        so): at run time it may be a subclass, so an attribute `C` lacks is missing only when no
        class of vLLM's source defines a name of that spelling."""
        return _existence(qualname, self.answer(qualname, on_instance, declared))

    def module(self, name: str) -> Existence:
        """Whether module `name` exists (a compiled one included, where the source can tell)."""
        return _existence(name, self.module_answer(name))

    def imported(self, qualname: str, whole_module: bool = False) -> Existence:
        """Whether `from a.b import name` (`whole_module`: `import a.b.name`, or a star import of
        it) finds what it names; a missing name that public modules of this vLLM define at top
        level is MOVED, with where (the module it was imported from left out)."""
        module, name = qualname.rpartition(".")[0], qualname.rpartition(".")[2]
        found = self.module(qualname if whole_module else module)
        if found.kind is Presence.PRESENT and not whole_module:
            found = self.exists(qualname)
        if found.kind is not Presence.MISSING:
            return replace(found, name=qualname)  # an unknown module stands for the name asked
        moved = tuple(m for m in self.relocations(name, limit=4) if f"{m}.{name}" != qualname)[:3]
        return Existence(Presence.MOVED if moved else Presence.MISSING, qualname, found.reason, moved)

    def answer(self, qualname: str, on_instance: bool = False, declared: bool = False) -> Answer:
        """`exists` as (True | False | None, why): the form the on-disk cache keeps."""
        return self._cached(f"exists:{int(on_instance)}{int(declared)}:{qualname}",
                            lambda: self._exists(qualname, on_instance, declared))

    def _exists(self, qualname: str, on_instance: bool, declared: bool) -> Answer:
        owner, _, attr = qualname.rpartition(".")
        if not owner:
            return self.module_answer(qualname)
        try:
            obj = self.names.lookup(owner)
        except Unknown as exc:
            if on_instance:
                cls, why = self.instance_class(owner)
                if cls is not None:
                    answer = self._class_attr(cls, attr, True)
                    # Not `declared`: the object is what vLLM built for that field (a worker's model
                    # runner), of exactly the class the field is annotated with.
                    return self._subclass_may_define(answer, cls, attr) if declared else answer
                if why:
                    return None, why
            found, why = self.answer(owner)
            if found is False:
                return False, why
            return None, str(exc)
        except RecursionError:
            return None, "the source nests too deeply to follow"
        if isinstance(obj, Module):
            return self._module_attr(obj, attr)
        if isinstance(obj, Class):
            answer = self._class_attr(obj, attr, on_instance)
            return self._subclass_may_define(answer, obj, attr) if declared and on_instance else answer
        if isinstance(obj, Func):
            if not on_instance:
                return None, f"{owner} is a function"
            # What the function returns, when its annotation names one class of vLLM's source.
            returns = _plain_annotation(obj.node.returns)
            if returns is None:
                return None, f"{owner}() has no plain class as its return annotation"
            try:
                returned = self.names.expr(obj.module, returns)
            except Unknown as exc:
                return None, f"the return annotation of {owner}: {exc}"
            if not isinstance(returned, Class):
                return None, f"{owner}() returns {ast.unparse(returns)}, outside vLLM's source"
            return self._subclass_may_define(self._class_attr(returned, attr, True), returned, attr)
        return None, f"{owner} resolves to {obj.qualname}, outside vLLM's source"

    def instance_class(self, path: str) -> tuple[Class | None, str]:
        """The class of the object `path` names: `a.b.C.f.g` is what field `g` of what field `f`
        of a `C` is annotated as (in the class body, or where a method sets it: `self.f: X = ...`);
        `a.b.func.f` starts from `func`'s return annotation. (None, why)
        when an annotation is missing or names no class of vLLM's source; (None, "") when `path`
        does not start at a class or function."""
        parts = path.split(".")
        for i in range(len(parts) - 1, 0, -1):
            try:
                obj = self.names.lookup(".".join(parts[:i]))
            except Unknown:
                continue
            break
        else:
            return None, ""
        cls: Class | None
        if isinstance(obj, Func):
            cls = self._annotated_class(obj.module, obj.node.returns)
            if cls is None:
                return None, f"{'.'.join(parts[:i])}() has no plain vLLM class as its return annotation"
        elif isinstance(obj, Class):
            cls = obj
        else:
            return None, ""
        for field in parts[i:]:
            owner = cls
            cls = None
            for entry in [e for e in self._mro_classes(owner)]:
                ann = next((st.annotation for st in entry.node.body if isinstance(st, ast.AnnAssign)
                            and isinstance(st.target, ast.Name) and st.target.id == field), None)
                if ann is None:
                    ann = _set_with_annotation(entry.node, field)
                if ann is not None:
                    cls = self._annotated_class(entry.module, ann)
                    break
            if cls is None:
                return None, f"the type of {owner.label}.{field} is not annotated as one vLLM class"
        return cls, ""

    def _annotated_class(self, module: Module, ann: ast.expr | None) -> Class | None:
        target = unwrap_annotation(ann)
        if target is None:
            return None
        try:
            found = self.names.expr(module, target)
        except Unknown:
            # An annotation is read by type checkers, which see what `if TYPE_CHECKING:` imports
            # (vLLM's GPU Worker imports its runner's class there); the runtime scope does not.
            qual = self._type_checking_import(module, target) if isinstance(target, ast.Name) else None
            if qual is None:
                return None
            try:
                found = self.names.lookup(qual)
            except Unknown:
                return None
        return found if isinstance(found, Class) else None

    def _type_checking_import(self, module: Module, name: ast.Name) -> str | None:
        """What `from m import name` under the module's top-level `if TYPE_CHECKING:` names."""
        data = self.names._read(module.path)
        try:
            tree = ast.parse(data or b"", filename=module.path)
        except (SyntaxError, ValueError):
            return None
        package = module.name if module.is_package else module.name.rpartition(".")[0]
        for stmt in tree.body:
            if not (isinstance(stmt, ast.If) and ast.unparse(stmt.test) in _TYPE_CHECKING):
                continue
            for sub in stmt.body:
                if not isinstance(sub, ast.ImportFrom):
                    continue
                base = resolve_relative(package, sub.level, sub.module)
                for alias in sub.names:
                    if base and (alias.asname or alias.name) == name.id:
                        return f"{base}.{alias.name}"
        return None

    def _mro(self, cls: Class) -> list[Class | str | Unresolved]:
        """`cls`'s MRO as attribute lookup walks it (`Names.attribute_mro`); a class whose order
        cannot be had (it inherits from itself) stands alone, with why."""
        try:
            return self.names.attribute_mro(cls)
        except Unknown as exc:
            return [cls, Unresolved(str(exc))]

    def _mro_classes(self, cls: Class) -> list[Class]:
        """`cls` and the classes of vLLM's source it inherits from, in MRO order."""
        return [e for e in self._mro(cls) if isinstance(e, Class)]

    def _owner(self, mro: list[Class | str | Unresolved], base: str) -> str:
        """The first class of `mro` that names outside base `base` among its bases."""
        return next((e.label for e in mro if isinstance(e, Class) and base in self.names.bases(e)), "")

    def module_answer(self, name: str) -> Answer:
        return self._cached(f"module:{name}", lambda: self._module_answer(name))

    def _module_answer(self, name: str) -> Answer:
        found = self.module_exists(name)
        if found is None:
            return None, f"no source for module {name}, and this vLLM source holds no compiled modules to look in"
        return (True, "") if found else (False, f"no module {name}")

    def _subclass_may_define(self, found: Answer, cls: Class, attr: str) -> Answer:
        if found[0] is not False:
            return found
        abstract = self._abstract(cls)
        if abstract:
            return None, (f"{cls.label} has no attribute {attr!r}, but it is {abstract}: the object is "
                          f"an instance of some subclass, which may have it")
        where = defined_somewhere(self.names.source, attr)
        self._untracked = True  # read every file of the tree, which the cache does not record
        if where:
            return None, (f"{cls.label} has no attribute {attr!r}, but the object is only annotated as "
                          f"{cls.label}: a subclass may define it ({where} does)")
        return False, f"{found[1]} (nor does any class of this vLLM)"

    def _abstract(self, cls: Class) -> str:
        """Why instances of `cls` are always of a subclass ("" when it looks concrete)."""
        mro = self._mro(cls)
        for entry in mro:
            if isinstance(entry, Class):
                for kw in entry.node.keywords:
                    if kw.arg == "metaclass" and ast.unparse(kw.value).endswith("ABCMeta"):
                        return "an abstract class"
                for fn in entry.node.body:
                    if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
                            ast.unparse(d).endswith("abstractmethod") for d in fn.decorator_list):
                        return "an abstract class"
            elif (isinstance(entry, str) and entry.rpartition(".")[2] in ("Protocol", "ABC")
                  and self._owner(mro, entry)):
                return "a Protocol" if entry.endswith("Protocol") else "an abstract class"
        return ""

    def _module_attr(self, mod: Module, attr: str) -> Answer:
        scope = mod.scope
        if attr in scope.bindings or attr in scope.overloads or attr in _MODULE_DUNDERS:
            return True, ""
        sub = self.module_exists(f"{mod.name}.{attr}")
        if sub:
            return True, ""
        if sub is None:
            return None, (f"{mod.name} has no name {attr!r} in its source, and this vLLM source holds no "
                          f"compiled modules to look in")
        dynamic = dynamic_module(self.names.source, mod.path)
        if dynamic:
            return None, f"{mod.path} {dynamic}: its names are made at run time"
        if scope.star_imports or "__getattr__" in scope.bindings:
            try:
                self.names.lookup(f"{mod.name}.{attr}")
                return True, ""
            except Missing as exc:  # the source decides: e.g. its __getattr__ raises for it
                return False, str(exc)
            except Unknown as exc:
                return None, str(exc)
        return False, f"{mod.name} has no name {attr!r}"

    def _class_attr(self, cls: Class, attr: str, on_instance: bool) -> Answer:
        mro = self._mro(cls)
        undecided = ""
        for entry in mro:
            if isinstance(entry, Class):
                if _defines(entry, attr, on_instance):
                    return True, ""
                dynamic = _dynamic(entry, on_instance)
                if dynamic and not undecided:
                    undecided = f"{entry.label} {dynamic}"
                continue
            if isinstance(entry, Unresolved):
                undecided = undecided or entry.reason
                continue
            # An outside base named in the source (object last, below); the bases of its own
            # MRO are the standard library's to answer for (`_stdlib_has` walks them).
            owner = self._owner(mro, entry) if entry != "builtins.object" else ""
            if not owner:
                continue
            has = _stdlib_has(entry, attr)
            if has:
                return True, ""
            if has is None:
                undecided = undecided or f"base {entry} of {owner} is outside vLLM's source"
            elif on_instance and entry not in _NO_INSTANCE_ATTRIBUTES:
                undecided = undecided or f"base {entry} of {owner} may set instance attributes in its __init__"
        if undecided:
            return None, undecided
        if _stdlib_has("builtins.object", attr):
            return True, ""
        what = "instance of " if on_instance else ""
        return False, f"{what}{cls.label} has no attribute {attr!r}"

    def defines(self, qualname: str) -> bool | None:
        """For the guards: whether class `a.b.C` of `a.b.C.attr` binds `attr` in its body or an
        inherited one (True), surely does not (False), or the source cannot tell (None); for
        module `a.b` of `a.b.name`, whether the module binds `name`. Narrower
        than `exists`: a guard asks about methods vLLM renames, so a field or a `self.x` does not
        count, and the plain outside roots (`_GUARD_ROOTS`) define none of them."""
        owner, _, attr = qualname.rpartition(".")
        try:
            cls = self.names.lookup(owner)
        except Unknown:
            return None
        if isinstance(cls, Module):
            # A module's own name (a `move` rule's guard: the old module lacks it, the new one
            # has it): what the audit's existence engine answers, an import of it included.
            return self.exists(qualname).found
        if not isinstance(cls, Class):
            return None
        unknown = False
        for entry in self._mro(cls):
            if isinstance(entry, Class):
                if entry.scope.bindings.get(attr) or attr in entry.scope.overloads:
                    return True
            elif isinstance(entry, Unresolved) or entry not in _GUARD_ROOTS:
                unknown = True
        return None if unknown else False

    # -- where a missing name lives now ----------------------------------------------------

    def relocations(self, name: str, limit: int = 3) -> list[str]:
        """Public modules of vLLM (no `_` component) that define `name` at top level, shortest
        first. Reads the whole tree (once per name and run); not kept on disk."""
        if name not in self._moved:
            self._moved[name] = relocated(self.names.source, name)
        return self._moved[name][:limit]

def _set_with_annotation(node: ast.ClassDef, field: str) -> ast.expr | None:
    """The annotation of the first `self.field: X = ...` in a method of the class (vLLM's GPU
    Worker annotates its model runner where init_device builds it)."""
    for fn in node.body:
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) or not fn.args.args:
            continue
        me = fn.args.args[0].arg
        for sub in ast.walk(fn):
            if (isinstance(sub, ast.AnnAssign) and isinstance(sub.target, ast.Attribute)
                    and sub.target.attr == field and isinstance(sub.target.value, ast.Name)
                    and sub.target.value.id == me):
                return sub.annotation
    return None


def _existence(name: str, answer: Answer) -> Existence:
    found, reason = answer
    kind = Presence.PRESENT if found else Presence.MISSING if found is False else Presence.UNKNOWN
    return Existence(kind, name, reason)


def _plain_annotation(node: ast.expr | None) -> ast.expr | None:
    """`C`, `"C"`, `m.C` -> that expression; Optional, unions and generics -> None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        try:
            node = ast.parse(node.value, mode="eval").body
        except SyntaxError:
            return None
    return node if isinstance(node, (ast.Name, ast.Attribute)) else None


def _defines(entry: Class, attr: str, on_instance: bool) -> bool:
    scope = entry.scope
    if attr in scope.bindings or attr in scope.overloads:
        return True
    for stmt in entry.node.body:  # annotated fields without a value (dataclasses, pydantic, msgspec)
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.target.id == attr:
            return True
    if not on_instance:
        return False
    for fn in entry.node.body:
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        args = [*fn.args.posonlyargs, *fn.args.args]
        if not args:
            continue
        me = args[0].arg
        for node in ast.walk(fn):
            if (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
                    and isinstance(node.value, ast.Name) and node.value.id == me and node.attr == attr):
                return True
    slots = scope.bindings.get("__slots__")
    if slots and slots[0].kind == "assign":
        try:
            return attr in ast.literal_eval(slots[0].node)
        except (ValueError, TypeError, SyntaxError):
            return False
    return False


def _dynamic(entry: Class, on_instance: bool) -> str:
    """Why attributes of this class may come from code the reader does not follow ("" if none)."""
    scope = entry.scope
    if on_instance and ("__getattr__" in scope.bindings or "__getattribute__" in scope.bindings):
        return "defines __getattr__"
    for dec in entry.node.decorator_list:
        target = dec.func if isinstance(dec, ast.Call) else dec
        name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
        if name not in _PLAIN_CLASS_DECORATORS:
            return f"is decorated with @{ast.unparse(target)}, which may add attributes"
    for kw in entry.node.keywords:
        if kw.arg == "metaclass":
            return f"has the metaclass {ast.unparse(kw.value)}"
    if on_instance:
        for node in ast.walk(entry.node):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr":
                return "sets attributes with setattr"
            if isinstance(node, ast.Attribute) and node.attr == "__dict__":
                return "writes its __dict__"
    return ""


class _NAMEDTUPLE(typing.NamedTuple):
    """An empty namedtuple class: what every class made with typing.NamedTuple has."""


def _stdlib_has(qualname: str, attr: str) -> bool | None:
    """Whether standard-library class `qualname` has `attr` (None: not a standard-library class)."""
    module, _, name = qualname.rpartition(".")
    if module.split(".")[0] not in sys.stdlib_module_names:
        return None
    if qualname in NAMEDTUPLES:
        # typing.NamedTuple is a function: a class made with it has every namedtuple's _replace,
        # _asdict, _fields, ...
        obj: Any = _NAMEDTUPLE
    else:
        try:
            obj = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            return None
    # In a class's own namespace, not hasattr: an enum's `name` answers only on instances.
    return any(attr in vars(k) for k in getattr(obj, "__mro__", (type(obj),))) or hasattr(obj, attr)


_VERSION: list[str] = []


def _version() -> str:
    """What the stored answers depend on besides vLLM's source: this module and its searches, the
    reader of the source (`vllm_source.py`: its annotation reading too), and the Python that
    answers for standard-library bases."""
    if not _VERSION:
        h = hashlib.sha256()
        for path in (Path(__file__), Path(__file__).with_name("search.py"), Path(__file__).parents[2] / "vllm_source.py"):
            h.update(path.read_bytes())
        python = ".".join(map(str, sys.version_info[:3]))
        _VERSION.append(f"{h.hexdigest()[:24]}-{sys.implementation.name}{python}")
    return _VERSION[0]

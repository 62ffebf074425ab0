"""Whether a name the package uses exists in vLLM's source: modules, module names, class and
instance attributes, enum members, and where a public name of that name lives when it is gone.

Answers are True, False (surely absent at run time) or None with the reason it cannot be told.
It is False only when everything that could define the name was read: every class of the MRO is
in vLLM's source or is a standard-library class (asked directly), no `__getattr__`, no
`setattr`, no decorator that may add attributes. This reads the static reader's parsed modules
(`signatures.static`'s `Names`); it adds no parsing of its own except the search for a moved
name, which greps the source only when something is missing.

Answers are kept in the reader's on-disk cache (`StaticSignatures.answers`) beside its
signatures, valid while every path read for them is unchanged: reads go through `Names` (which
records them) or the walk for compiled modules (which records each directory's listing). An
answer that needed a byte search of the whole tree (`defined_somewhere`) is not kept, nor is one
built on it: the tree's files are not recorded. The key holds the Python the tool runs on, which
answers for standard-library bases.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import os
import re
import sys
import zipfile
from pathlib import Path
from typing import Any

from .calls import unwrap_annotation

Answer = tuple[bool | None, str]

_MODULE_DUNDERS = frozenset({"__name__", "__file__", "__path__", "__doc__", "__spec__", "__loader__",
                             "__package__", "__dict__", "__all__"})
# Standard-library bases whose instances have no attributes their class does not show.
_NO_INSTANCE_ATTRIBUTES = frozenset({
    "builtins.object", "abc.ABC", "typing.Generic", "typing.Protocol", "typing_extensions.Protocol",
    "enum.Enum", "enum.IntEnum", "enum.StrEnum", "enum.Flag", "enum.IntFlag", "builtins.str", "builtins.int",
    "builtins.float", "builtins.bytes", "builtins.tuple", "typing.NamedTuple",
})
# Class decorators that add no public attributes (dataclass-like code generators).
_PLAIN_CLASS_DECORATORS = frozenset({"dataclass", "config", "total_ordering", "final", "runtime_checkable",
                                     "unique", "dataclass_transform"})


class Members:
    """Existence checks over one `Names` (the static reader's module cache)."""

    def __init__(self, names: Any):
        self.names = names
        from ..signatures.static.scope import Class, Ext, Func, Missing, Module, Unknown

        self._Class, self._Ext, self._Func, self._Module, self._Unknown = Class, Ext, Func, Module, Unknown
        self._Missing = Missing
        # This run's answers, each with whether it rests on a whole-tree search (never stored).
        self._memo: dict[str, tuple[Answer, bool]] = {}
        self._untracked = False
        ref = getattr(names, "memo", None)
        memo = ref() if ref is not None else None
        self._store = memo
        self._table = memo.answers("members", _version()) if memo is not None else None
        self._dirty = False

    def save(self) -> None:
        """Keep this run's new answers on disk (once, after the checks)."""
        if self._dirty and self._store is not None:
            self._store.save_answers()
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
        except self._Unknown:
            return True  # present but unparsable: not our finding
        compiled, walked = _compiled(self.names.root, name)
        self.names.accessed.update(walked)
        return None if compiled is None else compiled

    def exists(self, qualname: str, on_instance: bool = False, declared: bool = False) -> Answer:
        """Whether `a.b.C.attr` (an attribute of module/class `a.b.C`) exists.

        `declared`: the instance is only annotated as `C` (or returned by a function annotated
        so): at run time it may be a subclass, so an attribute `C` lacks is missing only when no
        class of vLLM's source defines a name of that spelling."""
        return self._cached(f"exists:{int(on_instance)}{int(declared)}:{qualname}",
                            lambda: self._exists(qualname, on_instance, declared))

    def _exists(self, qualname: str, on_instance: bool, declared: bool) -> Answer:
        owner, _, attr = qualname.rpartition(".")
        if not owner:
            return self.module_answer(qualname)
        try:
            obj = self.names.lookup(owner)
        except self._Unknown as exc:
            if on_instance:
                cls, why = self.instance_class(owner)
                if cls is not None:
                    return self._subclass_may_define(self._class_attr(cls, attr, True), cls, attr)
                if why:
                    return None, why
            found, why = self.exists(owner)
            if found is False:
                return False, why
            return None, str(exc)
        except RecursionError:
            return None, "the source nests too deeply to follow"
        if isinstance(obj, self._Module):
            return self._module_attr(obj, attr)
        if isinstance(obj, self._Class):
            found = self._class_attr(obj, attr, on_instance)
            return self._subclass_may_define(found, obj, attr) if declared and on_instance else found
        if isinstance(obj, self._Func):
            if not on_instance:
                return None, f"{owner} is a function"
            # What the function returns, when its annotation names one class of vLLM's source.
            returns = _plain_annotation(obj.node.returns)
            if returns is None:
                return None, f"{owner}() has no plain class as its return annotation"
            try:
                cls = self.names.expr(obj.module, returns)
            except self._Unknown as exc:
                return None, f"the return annotation of {owner}: {exc}"
            if not isinstance(cls, self._Class):
                return None, f"{owner}() returns {ast.unparse(returns)}, outside vLLM's source"
            return self._subclass_may_define(self._class_attr(cls, attr, True), cls, attr)
        return None, f"{owner} resolves to {obj.qualname}, outside vLLM's source"

    def instance_class(self, path: str) -> tuple[Any, str]:
        """The class of the object `path` names: `a.b.C.f.g` is what field `g` of what field `f`
        of a `C` is annotated as; `a.b.func.f` starts from `func`'s return annotation. (None, why)
        when an annotation is missing or names no class of vLLM's source; (None, "") when `path`
        does not start at a class or function."""
        parts = path.split(".")
        for i in range(len(parts) - 1, 0, -1):
            try:
                obj = self.names.lookup(".".join(parts[:i]))
            except self._Unknown:
                continue
            break
        else:
            return None, ""
        if isinstance(obj, self._Func):
            obj = self._annotated_class(obj.module, obj.node.returns)
            if obj is None:
                return None, f"{'.'.join(parts[:i])}() has no plain vLLM class as its return annotation"
        if not isinstance(obj, self._Class):
            return None, ""
        for field in parts[i:]:
            owner = obj
            obj = None
            for entry in [e for e in self._mro_classes(owner)]:
                ann = next((st.annotation for st in entry.node.body if isinstance(st, ast.AnnAssign)
                            and isinstance(st.target, ast.Name) and st.target.id == field), None)
                if ann is not None:
                    obj = self._annotated_class(entry.module, ann)
                    break
            if obj is None:
                return None, f"the type of {owner.label}.{field} is not annotated as one vLLM class"
        return obj, ""

    def _annotated_class(self, module: Any, ann: ast.expr | None) -> Any:
        target = unwrap_annotation(ann)
        if target is None:
            return None
        try:
            found = self.names.expr(module, target)
        except self._Unknown:
            return None
        return found if isinstance(found, self._Class) else None

    def _mro_classes(self, cls: Any) -> list[Any]:
        """`cls` and the bases of it in vLLM's source, depth first (enough to find an annotation)."""
        out, stack, seen = [], [cls], set()
        while stack:
            entry = stack.pop(0)
            if id(entry.node) in seen:
                continue
            seen.add(id(entry.node))
            out.append(entry)
            stack += [obj for obj in self._bases(entry) if isinstance(obj, self._Class)]
        return out

    def _bases(self, entry: Any) -> list[Any]:
        """The bases of a class as the source names them (a Class of vLLM's, or an Ext outside it);
        a base that cannot be resolved is left out."""
        out = []
        for base in entry.node.bases:
            target = base.value if isinstance(base, ast.Subscript) else base
            try:
                out.append(self.names.expr(entry.module, target))
            except self._Unknown:
                continue
        return out

    def module_answer(self, name: str) -> Answer:
        return self._cached(f"module:{name}", lambda: self._module_answer(name))

    def _module_answer(self, name: str) -> Answer:
        found = self.module_exists(name)
        if found is None:
            return None, f"no source for module {name}, and this vLLM source holds no compiled modules to look in"
        return (True, "") if found else (False, f"no module {name}")

    def _subclass_may_define(self, found: Answer, cls: Any, attr: str) -> Answer:
        if found[0] is not False:
            return found
        abstract = self._abstract(cls)
        if abstract:
            return None, (f"{cls.label} has no attribute {attr!r}, but it is {abstract}: the object is "
                          f"an instance of some subclass, which may have it")
        where = defined_somewhere(self.names.root, attr)
        self._untracked = True  # read every file of the tree, which the cache does not record
        if where:
            return None, (f"{cls.label} has no attribute {attr!r}, but the object is only annotated as "
                          f"{cls.label}: a subclass may define it ({where} does)")
        return False, f"{found[1]} (nor does any class of this vLLM)"

    def _abstract(self, cls: Any) -> str:
        """Why instances of `cls` are always of a subclass ("" when it looks concrete)."""
        seen: set[int] = set()
        stack = [cls]
        while stack:
            entry = stack.pop()
            if id(entry.node) in seen:
                continue
            seen.add(id(entry.node))
            for kw in entry.node.keywords:
                if kw.arg == "metaclass" and ast.unparse(kw.value).endswith("ABCMeta"):
                    return "an abstract class"
            for fn in entry.node.body:
                if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
                        ast.unparse(d).endswith("abstractmethod") for d in fn.decorator_list):
                    return "an abstract class"
            for obj in self._bases(entry):
                if isinstance(obj, self._Class):
                    stack.append(obj)
                elif isinstance(obj, self._Ext) and obj.qualname.rpartition(".")[2] in ("Protocol", "ABC"):
                    return "a Protocol" if obj.qualname.endswith("Protocol") else "an abstract class"
        return ""

    def _module_attr(self, mod: Any, attr: str) -> Answer:
        scope = mod.scope
        if attr in scope.bindings or attr in scope.overloads or attr in _MODULE_DUNDERS:
            return True, ""
        sub = self.module_exists(f"{mod.name}.{attr}")
        if sub:
            return True, ""
        if sub is None:
            return None, (f"{mod.name} has no name {attr!r} in its source, and this vLLM source holds no "
                          f"compiled modules to look in")
        dynamic = _dynamic_module(self.names.root, mod.path)
        if dynamic:
            return None, f"{mod.path} {dynamic}: its names are made at run time"
        if scope.star_imports or "__getattr__" in scope.bindings:
            try:
                self.names.lookup(f"{mod.name}.{attr}")
                return True, ""
            except self._Missing as exc:  # the source decides: e.g. its __getattr__ raises for it
                return False, str(exc)
            except self._Unknown as exc:
                return None, str(exc)
        return False, f"{mod.name} has no name {attr!r}"

    def _class_attr(self, cls: Any, attr: str, on_instance: bool) -> Answer:
        seen: set[int] = set()
        stack = [cls]
        undecided = ""
        while stack:
            entry = stack.pop(0)
            if id(entry.node) in seen:
                continue
            seen.add(id(entry.node))
            if _defines(entry, attr, on_instance):
                return True, ""
            dynamic = _dynamic(entry, on_instance)
            if dynamic and not undecided:
                undecided = f"{entry.label} {dynamic}"
            for base in entry.node.bases:
                target = base.value if isinstance(base, ast.Subscript) else base
                try:
                    obj = self.names.expr(entry.module, target)
                except self._Unknown as exc:
                    undecided = undecided or f"base {ast.unparse(base)} of {entry.label}: {exc}"
                    continue
                if isinstance(obj, self._Class):
                    stack.append(obj)
                elif isinstance(obj, self._Ext):
                    has = _stdlib_has(obj.qualname, attr)
                    if has:
                        return True, ""
                    if has is None:
                        undecided = undecided or f"base {obj.qualname} of {entry.label} is outside vLLM's source"
                    elif on_instance and obj.qualname not in _NO_INSTANCE_ATTRIBUTES:
                        undecided = undecided or (f"base {obj.qualname} of {entry.label} may set instance "
                                                  f"attributes in its __init__")
                else:
                    undecided = undecided or f"base {ast.unparse(base)} of {entry.label} is not a class"
        if undecided:
            return None, undecided
        if _stdlib_has("builtins.object", attr):
            return True, ""
        what = "instance of " if on_instance else ""
        return False, f"{what}{cls.label} has no attribute {attr!r}"


def _plain_annotation(node: ast.expr | None) -> ast.expr | None:
    """`C`, `"C"`, `m.C` -> that expression; Optional, unions and generics -> None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        try:
            node = ast.parse(node.value, mode="eval").body
        except SyntaxError:
            return None
    return node if isinstance(node, (ast.Name, ast.Attribute)) else None


def _defines(entry: Any, attr: str, on_instance: bool) -> bool:
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


def _dynamic(entry: Any, on_instance: bool) -> str:
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


def _stdlib_has(qualname: str, attr: str) -> bool | None:
    """Whether standard-library class `qualname` has `attr` (None: not a standard-library class)."""
    module, _, name = qualname.rpartition(".")
    if module.split(".")[0] not in sys.stdlib_module_names:
        return None
    try:
        obj = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return None
    # In a class's own namespace, not hasattr: an enum's `name` answers only on instances.
    return any(attr in vars(k) for k in getattr(obj, "__mro__", (type(obj),))) or hasattr(obj, attr)


# ---------------------------------------------------------------------------- where it moved

def relocated(root: Path, name: str, limit: int = 3) -> list[str]:
    """Public modules of vLLM (no `_` component) that define `name` at top level, shortest first."""
    pattern = re.compile(
        rb"^(?:(?:async\s+)?def|class)\s+" + re.escape(name.encode()) + rb"\b|^" + re.escape(name.encode())
        + rb"\s*(?::|=(?!=))", re.MULTILINE)
    found = []
    for rel, read in _sources(root):
        parts = rel[: -len(".py")].split("/")
        if parts[-1] == "__init__":
            parts.pop()
        if any(p.startswith("_") for p in parts):
            continue
        data = read()
        if name.encode() in data and pattern.search(data):
            found.append(".".join(parts))
    found.sort(key=lambda m: (m.count("."), m))
    return found[:limit]


_DYNAMIC_MARKS = ((b"globals()", "passes or writes globals()"), (b"sys.modules[__name__]", "writes itself"),
                  (b"vars()", "writes vars()"))


def _dynamic_module(root: Path, path: str) -> str:
    """Why a module's names may be made at run time (generated protobuf code fills globals())."""
    try:
        if root.is_file():
            with zipfile.ZipFile(root) as zf:
                data = zf.read(path)
        else:
            data = (root / path).read_bytes()
    except (OSError, KeyError, IsADirectoryError):
        return ""
    return next((why for mark, why in _DYNAMIC_MARKS if mark in data), "")


_EXTENSIONS = (".so", ".pyd")
_COMPILED: dict[str, tuple[list[str] | None, dict[str, Any]]] = {}


def _compiled(root: Path, name: str) -> tuple[bool | None, dict[str, Any]]:
    """Whether a compiled module `name` is in the source, or listed in its dist-info RECORD (None:
    neither holds a compiled file, e.g. a git checkout); and the listing stamp of every directory
    walked to tell (the RECORD and a wheel are the signature cache's own deps)."""
    key = str(root)
    if key not in _COMPILED:
        walked: dict[str, Any] = {}
        if root.is_file():
            with zipfile.ZipFile(root) as zf:
                files = [n for n in zf.namelist() if n.startswith("vllm/") and n.endswith(_EXTENSIONS)]
        else:
            files = _walk_compiled(root, walked)
            if not files:  # the `.py` files of a wheel: its RECORD still lists the compiled ones
                for record in root.glob("vllm-*.dist-info/RECORD"):
                    rows = record.read_text("utf-8", "replace").splitlines()
                    files += [r.split(",", 1)[0] for r in rows if r.split(",", 1)[0].endswith(_EXTENSIONS)]
        _COMPILED[key] = (files or None, walked)
    files, walked = _COMPILED[key]
    if files is None:
        return None, walked
    rel = name.replace(".", "/")
    return any(f.startswith(rel + ".") and f.count("/") == rel.count("/") for f in files), walked


def _walk_compiled(root: Path, walked: dict[str, Any]) -> list[str]:
    """The compiled files under root/vllm (as `rglob` finds them: symlinked folders not entered),
    recording each folder's listing stamp in `walked`. `__pycache__` is not entered: nothing in it
    is importable as a module, and its listing changes whenever an import writes bytecode."""
    from ..signatures.static.names import LISTING, listing

    files = []
    for dirpath, dirnames, filenames in os.walk(root / "vllm"):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        here = Path(dirpath)
        rel = here.relative_to(root).as_posix()
        walked[rel + LISTING] = listing(here)
        files += [f"{rel}/{n}" for n in (*dirnames, *filenames) if n.endswith(_EXTENSIONS)]
    return files


_VERSION: list[str] = []


def _version() -> str:
    """What the stored answers depend on besides vLLM's source: this module and calls.py (its
    annotation reading), and the Python that answers for standard-library bases."""
    if not _VERSION:
        h = hashlib.sha256()
        for path in (Path(__file__), Path(__file__).with_name("calls.py")):
            h.update(path.read_bytes())
        python = ".".join(map(str, sys.version_info[:3]))
        _VERSION.append(f"{h.hexdigest()[:24]}-{sys.implementation.name}{python}")
    return _VERSION[0]


_DEFINED: dict[tuple[str, str], str] = {}


def defined_somewhere(root: Path, attr: str) -> str:
    """The first vLLM module that defines or assigns `attr` in any spelling ("" if none)."""
    key = (str(root), attr)
    if key not in _DEFINED:
        name = re.escape(attr.encode())
        pattern = re.compile(rb"def\s+" + name + rb"\b|\b" + name + rb"\s*(?::|=(?!=))|\." + name + rb"\s*=(?!=)")
        _DEFINED[key] = ""
        for rel, read in _sources(root):
            data = read()
            if attr.encode() in data and pattern.search(data):
                _DEFINED[key] = rel[: -len(".py")].replace("/", ".")
                break
    return _DEFINED[key]


def _sources(root: Path) -> Any:
    if root.is_file():
        zf = zipfile.ZipFile(root)
        for info in zf.infolist():
            if info.filename.startswith("vllm/") and info.filename.endswith(".py"):
                yield info.filename, (lambda n=info.filename: zf.read(n))
        return
    base = root / "vllm"
    for path in sorted(base.rglob("*.py")):
        yield path.relative_to(root).as_posix(), path.read_bytes

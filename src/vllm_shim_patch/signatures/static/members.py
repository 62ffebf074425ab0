"""Whether a vLLM class defines a name, read off the source (for guards on renamed methods), and
whether any vLLM name exists at all (for the audit: imports, attributes, enum members).

The attribute may come from any class in the MRO. Bases outside vLLM's source are taken to
define none of the names vLLM itself renames only when they are the plain roots below (torch's
`nn.Module`, `object`, the typing and abc helpers); any other outside base leaves the answer unknown.
"""

from __future__ import annotations

import ast

from .names import Names
from .scope import Class, Ext, Missing, Unknown

__all__ = ["defines", "exists"]

_ROOTS = frozenset({
    "builtins.object", "torch.nn.Module", "torch.nn.modules.module.Module", "typing.Generic",
    "typing.Protocol", "typing_extensions.Protocol", "abc.ABC", "abc.ABCMeta",
})


def defines(names: Names, qualname: str) -> bool | None:
    """True when class `a.b.C` of `a.b.C.attr` has `attr` in the source; False when it surely has
    not; None when it cannot be told."""
    owner, _, attr = qualname.rpartition(".")
    try:
        cls = names.lookup(owner)
    except Unknown:
        return None
    if not isinstance(cls, Class):
        return None
    seen: set[int] = set()
    stack: list[Class] = [cls]
    unknown = False
    while stack:
        entry = stack.pop()
        if id(entry.node) in seen:
            continue
        seen.add(id(entry.node))
        if entry.scope.bindings.get(attr) or attr in entry.scope.overloads:
            return True
        for base in entry.node.bases:
            target = base.value if isinstance(base, ast.Subscript) else base
            try:
                obj = names.expr(entry.module, target)
            except Unknown:
                unknown = True
                continue
            if isinstance(obj, Class):
                stack.append(obj)
            elif not (isinstance(obj, Ext) and obj.qualname in _ROOTS):
                unknown = True
    return None if unknown else False


# External bases whose attributes this interpreter's own copy can answer for: the standard
# library's, which the target's Python has too (a name added in a later Python is the one risk).
def _stdlib_roots() -> dict[str, object]:
    import abc
    import enum
    import typing

    roots: dict[str, object] = {
        "builtins.object": object, "builtins.tuple": tuple, "builtins.int": int,
        "builtins.str": str, "builtins.dict": dict, "builtins.list": list,
        "builtins.Exception": Exception, "abc.ABC": abc.ABC, "typing.Generic": typing.Generic,
        "typing_extensions.Generic": typing.Generic, "typing.Protocol": typing.Protocol,
        "typing_extensions.Protocol": typing.Protocol,
    }
    # A NamedTuple class has the generated _replace, _asdict, _fields, ... of any namedtuple.
    roots["typing.NamedTuple"] = roots["typing_extensions.NamedTuple"] = typing.NamedTuple("_", [])
    for name in ("Enum", "IntEnum", "Flag", "IntFlag", "StrEnum"):
        if hasattr(enum, name):
            roots[f"enum.{name}"] = getattr(enum, name)
    return roots


_STDLIB_ROOTS = _stdlib_roots()


def exists(names: Names, qualname: str) -> tuple[bool | None, str]:
    """Whether `qualname` names something that exists at run time: a module, a module-level
    name (lazy `__getattr__` exports included), or a class attribute, method, enum member,
    dataclass field or instance attribute (`self.x = ...` in any method), inherited ones
    included. (True/False/None, the reason when not True)."""
    try:
        names.lookup(qualname)
        return True, ""
    except Missing as exc:
        return False, str(exc)
    except Unknown as exc:
        reason = str(exc)
    owner, _, attr = qualname.rpartition(".")
    if not owner:
        return None, reason
    try:
        cls = names.lookup(owner)
    except Missing as exc:
        return False, str(exc)
    except Unknown as exc:
        return None, str(exc)
    if not isinstance(cls, Class):
        return None, reason
    return _class_has(names, cls, attr)


def _class_has(names: Names, cls: Class, attr: str) -> tuple[bool | None, str]:
    if hasattr(object, attr):
        return True, ""  # every class has object's
    seen: set[int] = set()
    stack: list[Class] = [cls]
    doubt = ""
    while stack:
        entry = stack.pop()
        if id(entry.node) in seen:
            continue
        seen.add(id(entry.node))
        if _binds(entry, attr):
            return True, ""
        for special in ("__getattr__", "__getattribute__"):
            if special in entry.scope.bindings:
                doubt = doubt or f"{entry.label} defines {special}"
        for kw in entry.node.keywords:
            if kw.arg == "metaclass":
                doubt = doubt or f"{entry.label} has a metaclass"
        for base in entry.node.bases:
            target = base.value if isinstance(base, ast.Subscript) else base
            try:
                obj = names.expr(entry.module, target)
            except Unknown as exc:
                doubt = doubt or f"base {ast.unparse(base)} of {entry.label}: {exc}"
                continue
            if isinstance(obj, Class):
                stack.append(obj)
            elif isinstance(obj, Ext) and obj.qualname in _STDLIB_ROOTS:
                if _root_has(_STDLIB_ROOTS[obj.qualname], attr):
                    return True, ""
            else:
                what = obj.qualname if isinstance(obj, Ext) else type(obj).__name__.lower()
                doubt = doubt or f"base {ast.unparse(base)} of {entry.label} is {what}, outside the source"
    if doubt:
        return None, f"{cls.label}.{attr} is not in the source and {doubt}"
    return False, f"{cls.label} has no attribute {attr!r} (class, inherited, field or self.{attr})"


def _root_has(root: object, attr: str) -> bool:
    # vars() along the MRO finds what only instances see (an enum's `value` raises on the class);
    # hasattr adds the metaclass's (an enum's `__members__`).
    mro = getattr(root, "__mro__", ())
    return any(attr in vars(k) for k in mro) or hasattr(root, attr)


def _binds(cls: Class, attr: str) -> bool:
    if cls.scope.bindings.get(attr) or attr in cls.scope.overloads:
        return True
    for stmt in cls.node.body:
        if (
            isinstance(stmt, ast.AnnAssign)
            and isinstance(stmt.target, ast.Name)
            and stmt.target.id == attr
        ):
            return True  # a field: dataclass, pydantic, msgspec, NamedTuple or annotation
        if (
            isinstance(stmt, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "__slots__" for t in stmt.targets)
            and _in_literal(stmt.value, attr)
        ):
            return True
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = stmt.args.posonlyargs + stmt.args.args
            if args and _assigns_self(stmt, args[0].arg, attr):
                return True
    return False


def _assigns_self(func: ast.FunctionDef | ast.AsyncFunctionDef, self_name: str, attr: str) -> bool:
    for node in ast.walk(func):
        if (
            isinstance(node, ast.Attribute)
            and node.attr == attr
            and isinstance(node.ctx, ast.Store)
            and isinstance(node.value, ast.Name)
            and node.value.id == self_name
        ):
            return True
    return False


def _in_literal(value: ast.expr, attr: str) -> bool:
    try:
        items = ast.literal_eval(value)
    except (ValueError, TypeError, SyntaxError):
        return False
    return attr == items if isinstance(items, str) else attr in items

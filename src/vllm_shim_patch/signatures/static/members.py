"""Whether a vLLM class defines a name, read off the source (for guards on renamed methods).

The attribute may come from any class in the MRO. Bases outside vLLM's source are taken to
define none of the names vLLM itself renames only when they are the plain roots below (torch's
`nn.Module`, `object`, the typing and abc helpers); any other outside base leaves the answer unknown.
"""

from __future__ import annotations

import ast

from .names import Names
from .scope import Class, Ext, Unknown

__all__ = ["defines"]

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

"""`method: {receiver, rename: {old: new}, classes}`: a method renamed on a receiver no qualified
name reaches (an untyped `self` inside a function bound to a vLLM object). Scoped (`in:`).

Guarded by the installed vLLM: every class named must define the new name and not the old one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .base import NodeReader, QUALNAME_RE, Fields, Operation, is_identifier

if TYPE_CHECKING:
    import libcst as cst

    from ..scoped import ScopedTransform
    from ..rule import OldSignature, Rule


@dataclass(frozen=True)
class MethodRename:
    receiver: str  # `self`, or a dotted name such as `self.model`
    old: str
    new: str
    classes: tuple[str, ...]  # the vLLM classes the receiver is an instance of


def parse(r: NodeReader, fields: Fields, parsed: dict[str, Any], signature: OldSignature | None) -> MethodRename:
    node = fields["method"][1]
    entries = r.mapping(node, "'method'")
    for key, (key_node, _) in entries.items():
        if key not in ("receiver", "rename", "classes"):
            raise r.fail(key_node, f"'method' has unknown key {key!r} (known: receiver, rename, classes)")
    for key in ("receiver", "rename", "classes"):
        if key not in entries:
            raise r.fail(node, f"'method' needs {key!r}")
    receiver = r.scalar(entries["receiver"][1], "'method: receiver'")
    if not all(part.isidentifier() for part in receiver.split(".")):
        raise r.fail(entries["receiver"][1], f"'method: receiver' {receiver!r} is not a name like self or self.model")
    pairs = list(r.mapping(entries["rename"][1], "'method: rename'").items())
    if len(pairs) != 1:
        raise r.fail(entries["rename"][1], "'method: rename' names one method: {old: new}")
    old, (key_node, value_node) = pairs[0]
    new = r.scalar(value_node, f"'method: rename' target for {old!r}")
    for name, n in ((old, key_node), (new, value_node)):
        if not is_identifier(name):
            raise r.fail(n, f"'method: rename': {name!r} is not a method name")
    if old == new:
        raise r.fail(value_node, f"'method: rename' {old!r} to itself")
    classes_node = entries["classes"][1]
    items = classes_node.value if isinstance(classes_node, r.yaml.SequenceNode) else [classes_node]
    classes = []
    for item in items:
        name = r.scalar(item, "'method: classes'")
        if not QUALNAME_RE.fullmatch(name):
            raise r.fail(item, f"'method: classes' {name!r} is not a fully qualified class name")
        classes.append(name)
    return MethodRename(receiver, old, new, tuple(classes))


def _transform(spec: MethodRename, rule: Rule) -> type[ScopedTransform]:
    import libcst as cst

    from ..scoped import ScopedTransform, dotted

    class Rename(ScopedTransform):
        region_only = True  # renames inside the region only

        def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.Call:
            func = updated_node.func
            if (self.in_scope and isinstance(func, cst.Attribute) and func.attr.value == spec.old
                    and dotted(func.value) == spec.receiver):
                self.edited(original_node, f"rename {spec.receiver}.{spec.old} to {spec.new}")
                return updated_node.with_changes(func=func.with_changes(attr=cst.Name(spec.new)))
            return updated_node

    return Rename


OPERATION = Operation(
    name="method",
    keys=("method",),
    parse=parse,
    compile=lambda spec, rule: [_transform(spec, rule)],
    describe=lambda spec: f"rename method `{spec.receiver}.{spec.old}` to `{spec.new}`",
    guardable=True,
    kinds=frozenset({"scope"}),
    implied_guard=lambda spec, calls: {"defines": tuple(f"{c}.{spec.new}" for c in spec.classes),
                                "lacks": tuple(f"{c}.{spec.old}" for c in spec.classes)},
)

"""`pin: {name: {value, if-default}}`: the callee kept its signature but changed a default, and
with it the behaviour; pass the old behaviour explicitly.

Guarded by the installed default: the argument is added only where the callee's default is
`if-default` (as source text) and the call does not pass it already.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .base import NodeReader, Fields, Operation, is_identifier

if TYPE_CHECKING:
    import libcst as cst

    from ..context import CallSite, Rewrite
    from ..rule import OldSignature


@dataclass(frozen=True)
class Pin:
    name: str
    value: str  # the expression to pass
    if_default: str  # the installed default (source text) that makes it needed


def parse(r: NodeReader, fields: Fields, parsed: dict[str, Any], signature: OldSignature | None) -> tuple[Pin, ...]:
    node = fields["pin"][1]
    out = []
    for name, (key_node, value_node) in r.mapping(node, "'pin'").items():
        if not is_identifier(name):
            raise r.fail(key_node, f"'pin': {name!r} is not a valid argument name")
        entries = r.mapping(value_node, f"'pin' {name!r}")
        for key, (k_node, _) in entries.items():
            if key not in ("value", "if-default"):
                raise r.fail(k_node, f"'pin' {name!r} has unknown key {key!r} (known: value, if-default)")
        texts = {}
        for key in ("value", "if-default"):
            if key not in entries:
                raise r.fail(value_node, f"'pin' {name!r} needs {key!r}")
            texts[key] = r.scalar(entries[key][1], f"'pin' {name!r} {key}").strip()
            try:
                ast.parse(texts[key], mode="eval")
            except (SyntaxError, ValueError, RecursionError, MemoryError):  # ValueError: a NUL byte
                raise r.fail(entries[key][1], f"'pin' {name!r}: {key} {texts[key]!r} is not a Python expression") from None
        out.append(Pin(name, texts["value"], texts["if-default"]))
    if not out:
        raise r.fail(node, "'pin' is empty")
    return tuple(out)


def _rewrite(pin: Pin) -> Rewrite:
    import libcst as cst
    from .. import arglist
    from ..context import NeedsHuman

    def rewrite(call: cst.Call, site: CallSite) -> cst.Call:
        sig = site.signature
        if sig is not None:
            if not sig.takes(pin.name):
                site.notes.append(f"not needed for this vLLM: {site.short_callee} does not take {pin.name}")
                return call
            default = sig.default_of(pin.name)
            if default != pin.if_default:
                shown = default if default is not None else "not a literal"
                site.notes.append(f"not needed for this vLLM: {site.short_callee}'s {pin.name} defaults to {shown}")
                return call
        names = site.arg_names(call)
        if pin.name in names:
            return call
        if None in names:
            raise NeedsHuman(f"cannot tell whether {pin.name} is passed already: {site.unnamed_reason()}")
        site.edits.append(f"pin {pin.name}={pin.value}")
        return arglist.append_arg(call, arglist.keyword_arg(pin.name, cst.parse_expression(pin.value)))

    return rewrite


OPERATION = Operation(
    name="pin",
    keys=("pin",),
    parse=parse,
    compile=lambda spec, rule: [_rewrite(p) for p in spec],
    describe=lambda spec: "; ".join(f"pass `{p.name}={p.value}` where it defaults to `{p.if_default}`" for p in spec),
    guardable=True,
    touches=lambda spec: tuple(p.name for p in spec),
)

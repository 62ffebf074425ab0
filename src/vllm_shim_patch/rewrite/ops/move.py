"""`move: module.Name`: the callable lives elsewhere now; the call and its import follow it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..results import MOVE_EDIT
from .base import NodeReader, QUALNAME_RE, Fields, Operation

if TYPE_CHECKING:
    import libcst as cst

    from ..context import CallSite, Rewrite
    from ..rule import OldSignature, Rule


def parse(r: NodeReader, fields: Fields, parsed: dict[str, Any], signature: OldSignature | None) -> str:
    node = fields["move"][1]
    move = r.scalar(node, "'move'")
    if not QUALNAME_RE.fullmatch(move):
        raise r.fail(node, f"'move' {move!r} is not a dotted module.name")
    return move


def compile_spec(target: str, rule: Rule) -> list[Rewrite]:
    import libcst as cst
    module, _, name = target.rpartition(".")

    def rewrite(call: cst.Call, site: CallSite) -> cst.Call:
        # The engine drops the old import (any form: alias, `import a.b`, `from a import b`)
        # when the callee expression is replaced and the import is left unused.
        site.imports_to_add.append((module, name))
        site.edits.append(f"{MOVE_EDIT} {target}")
        site.moves.append(target)
        return call.with_changes(func=cst.Name(name))

    return [rewrite]


OPERATION = Operation(
    name="move",
    keys=("move",),
    parse=parse,
    compile=compile_spec,
    describe=lambda spec: f"move to `{spec}`",
    guardable=False,
    # Only where the installed vLLM shows the move: the old module lacks the name and the new one
    # has it (where the source cannot tell, `since` decides).
    implied_guard=lambda spec, calls: {"defines": (spec,), "lacks": tuple(calls)},
)

"""`rename: {old: new}`: a keyword parameter of the callee was renamed."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .base import NodeReader, Fields, Operation, is_identifier

if TYPE_CHECKING:
    import libcst as cst

    from ..context import CallSite, Rewrite
    from ..rule import OldSignature, Rule


def parse(r: NodeReader, fields: Fields, parsed: dict[str, Any], signature: OldSignature | None
          ) -> tuple[tuple[str, str], ...]:
    node = fields["rename"][1]
    out = []
    for old, (key_node, value_node) in r.mapping(node, "'rename'").items():
        new = r.scalar(value_node, f"'rename' target for {old!r}")
        for name, n in ((old, key_node), (new, value_node)):
            if not is_identifier(name):
                raise r.fail(n, f"'rename': {name!r} is not a valid argument name")
        if old == new:
            raise r.fail(value_node, f"'rename' {old!r} to itself")
        out.append((old, new))
    if not out:
        raise r.fail(node, "'rename' is empty")
    return tuple(out)


def _rewrite(old: str, new: str) -> Rewrite:
    import libcst as cst

    def rewrite(call: cst.Call, site: CallSite) -> cst.Call:
        sig = site.signature
        if sig is not None and (sig.takes(old) or not sig.takes(new)):
            why = f"still takes {old}" if sig.takes(old) else f"does not take {new}"
            site.notes.append(f"not needed for this vLLM: {site.short_callee} {why}")
            return call
        names = site.arg_names(call)
        if new in names or old not in names:
            # Passed positionally, a renamed parameter still binds: only keywords need the new name.
            return call
        index = names.index(old)
        args = list(call.args)
        if args[index].keyword is None:
            return call
        args[index] = args[index].with_changes(keyword=cst.Name(new))
        site.edits.append(f"rename {old} to {new}")
        return call.with_changes(args=args)

    return rewrite


def compile_spec(spec: tuple[tuple[str, str], ...], rule: Rule) -> list[Rewrite]:
    return [_rewrite(old, new) for old, new in spec]


OPERATION = Operation(
    name="rename",
    keys=("rename",),
    parse=parse,
    compile=compile_spec,
    describe=lambda spec: "; ".join(f"rename `{a}` to `{b}`" for a, b in spec),
    guardable=True,
    touches=lambda spec: tuple(n for pair in spec for n in pair),
)

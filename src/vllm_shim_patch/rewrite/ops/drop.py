"""`drop: [name, ...]`: the callee no longer accepts these arguments (griffe: parameter removed)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .base import NodeReader, Fields, Operation

if TYPE_CHECKING:
    import libcst as cst

    from ..context import CallSite, Rewrite
    from ..rule import OldSignature, Rule


def parse(r: NodeReader, fields: Fields, parsed: dict[str, Any], signature: OldSignature | None) -> tuple[str, ...]:
    names = r.names(fields["drop"][1], "'drop'")
    if signature is not None:
        for name, item in names:
            if name not in signature.names:
                raise r.fail(item, f"'drop' names {name!r}, which the old 'signature' does not have")
    return tuple(n for n, _ in names)


def _rewrite(name: str) -> Rewrite:
    from .. import arglist
    from ..context import NeedsHuman, repeatable

    def rewrite(call: cst.Call, site: CallSite) -> cst.Call:
        sig = site.signature
        if sig is not None and sig.takes(name):
            site.notes.append(f"not needed for this vLLM: {site.short_callee} still takes {name}")
            return call
        names = site.arg_names(call)
        if name not in names:
            if None in names:
                raise NeedsHuman(f"cannot tell whether {name} is passed: {site.unnamed_reason()}")
            return call
        index = names.index(name)
        args = list(call.args)
        if not repeatable(args[index].value):
            # The value would vanish with the argument: a call in it would no longer run.
            raise NeedsHuman(f"dropping {name} would also drop the expression it passes, which may have side effects")
        if args[index].keyword is None:
            # Dropping a positional shifts the ones after it: pass those by name instead.
            for later in range(index + 1, len(args)):
                if args[later].keyword is None:
                    later_name = names[later]
                    if later_name is None:
                        raise NeedsHuman(f"dropping positional {name} shifts an argument: {site.unnamed_reason()}")
                    old = site.rule.signature
                    if old is not None and later_name in old.positional_only:
                        raise NeedsHuman(f"dropping positional {name} shifts {later_name}, which is positional-only")
                    args[later] = arglist.as_keyword(args[later], later_name)
            call = call.with_changes(args=args)
        site.edits.append(f"drop {name}")
        return arglist.remove_arg(call, index)

    return rewrite


def compile_spec(spec: tuple[str, ...], rule: Rule) -> list[Rewrite]:
    return [_rewrite(name) for name in spec]


OPERATION = Operation(
    name="drop",
    keys=("drop",),
    parse=parse,
    compile=compile_spec,
    describe=lambda spec: "; ".join(f"drop `{n}`" for n in spec),
    guardable=True,
    touches=lambda spec: tuple(spec),
)

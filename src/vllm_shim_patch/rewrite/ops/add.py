"""`add: {name: expression}`: the callee now requires (or accepts) these arguments."""

from __future__ import annotations

import ast
import re
from typing import TYPE_CHECKING, Any

from .base import NodeReader, Fields, Operation, is_identifier

if TYPE_CHECKING:
    import libcst as cst

    from ..context import CallSite, Rewrite
    from ..rule import OldSignature, Rule

# `{vllm_config}` in an expression: the value of that argument at the call.
PLACEHOLDER_RE = re.compile(r"\{([A-Za-z_]\w*)\}")


def parse(r: NodeReader, fields: Fields, parsed: dict[str, Any], signature: OldSignature | None
          ) -> tuple[tuple[str, str], ...]:
    node = fields["add"][1]
    entries = r.mapping(node, "'add'")
    drop = parsed.get("drop", ())
    out = []
    for name, (key_node, value_node) in entries.items():
        if not is_identifier(name):
            raise r.fail(key_node, f"'add': {name!r} is not a valid argument name")
        expr = r.scalar(value_node, f"'add' value for {name!r}")
        for ph in PLACEHOLDER_RE.findall(expr):
            if ph in drop:
                # Drops run before adds: the placeholder would never have a value.
                raise r.fail(value_node, f"'add' {name!r}: placeholder {{{ph}}} names an argument this rule drops")
            if ph in entries:
                raise r.fail(value_node, f"'add' {name!r}: placeholder {{{ph}}} names an argument this rule adds")
            if signature is not None and ph not in signature.names:
                raise r.fail(
                    value_node,
                    f"'add' {name!r}: placeholder {{{ph}}} is not a parameter of the old 'signature' {signature.text}",
                )
        probe = PLACEHOLDER_RE.sub(lambda m: f"__vsp_{m.group(1)}", expr)
        try:
            ast.parse(probe.strip(), mode="eval")
        except (SyntaxError, ValueError, RecursionError, MemoryError):  # ValueError: a NUL byte
            raise r.fail(value_node, f"'add' {name!r}: {expr!r} is not a single Python expression") from None
        out.append((name, expr.strip()))
    if not out:
        raise r.fail(node, "'add' is empty")
    return tuple(out)


def _substitute(template: str, call: cst.Call, names: list[str | None]) -> cst.BaseExpression:
    import libcst as cst
    from ..context import NeedsHuman, repeatable

    module = cst.Module(body=[])
    pieces: dict[str, str] = {}
    for placeholder in PLACEHOLDER_RE.findall(template):
        if placeholder not in names:
            raise NeedsHuman(f"argument {placeholder} is not passed at this call, so {{{placeholder}}} has no value")
        value = call.args[names.index(placeholder)].value
        if not repeatable(value):
            # Copying `make_config()` would call it twice: a human must bind it to a name first.
            raise NeedsHuman(f"{{{placeholder}}} is bound to an expression that may have side effects")
        code = module.code_for_node(value)
        # A literal in an attribute chain needs parentheses: `(1).real`, not `1.real`.
        pieces[placeholder] = code if isinstance(value, (cst.Name, cst.Attribute)) else f"({code})"
    code = PLACEHOLDER_RE.sub(lambda m: pieces[m.group(1)], template)
    try:
        return cst.parse_expression(code)
    except cst.ParserSyntaxError:
        raise NeedsHuman(f"the 'add' expression does not parse with this call's values: {code!r}") from None


def _rewrite(name: str, template: str) -> Rewrite:
    from .. import arglist
    from ..context import NeedsHuman

    def rewrite(call: cst.Call, site: CallSite) -> cst.Call:
        sig = site.signature
        if sig is not None and not sig.takes(name):
            site.notes.append(f"not needed for this vLLM: {site.short_callee} does not take {name}")
            return call
        names = site.arg_names(call)
        if name in names:
            return call
        if None in names:
            raise NeedsHuman(f"cannot tell whether {name} is passed already: {site.unnamed_reason()}")
        value = _substitute(template, call, names)
        site.edits.append(f"add {name}")
        return arglist.append_arg(call, arglist.keyword_arg(name, value))

    return rewrite


def compile_spec(spec: tuple[tuple[str, str], ...], rule: Rule) -> list[Rewrite]:
    return [_rewrite(name, expr) for name, expr in spec]


OPERATION = Operation(
    name="add",
    keys=("add",),
    parse=parse,
    compile=compile_spec,
    describe=lambda spec: "; ".join(f"add `{n}={v}`" for n, v in spec),
    guardable=True,
    touches=lambda spec: tuple(n for n, _ in spec),
)

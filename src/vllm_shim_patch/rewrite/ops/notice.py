"""`notice: text` (with `missing: [...]`): a change no rewrite can make safely; tell a human."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .base import NodeReader, Fields, Operation

if TYPE_CHECKING:
    import libcst as cst

    from ..context import CallSite, Rewrite
    from ..rule import OldSignature, Rule


@dataclass(frozen=True)
class Notice:
    message: str
    missing: tuple[str, ...] = ()  # speak only where one of these is not passed


def parse(r: NodeReader, fields: Fields, parsed: dict[str, Any], signature: OldSignature | None) -> Notice:
    message = r.string(fields["notice"][1], "'notice'").strip()
    missing = tuple(n for n, _ in r.names(fields["missing"][1], "'missing'")) if "missing" in fields else ()
    return Notice(message, missing)


def compile_spec(spec: Notice, rule: Rule) -> list[Rewrite]:

    def rewrite(call: cst.Call, site: CallSite) -> cst.Call:
        passed = {a.keyword.value for a in call.args if a.keyword is not None}
        if spec.missing and not any(a.star for a in call.args) and set(spec.missing) <= passed:
            site.notes.append(f"not needed: {site.short_callee}(...) passes {', '.join(spec.missing)}")
            return call
        sig = site.signature
        if sig is not None:
            # Guarded, a notice speaks only of a call that does not bind as it stands.
            bound = sig.bind(
                sum(1 for a in call.args if a.keyword is None and not a.star),
                [a.keyword.value for a in call.args if a.keyword is not None],
                star_args=any(a.star == "*" for a in call.args),
                star_kwargs=any(a.star == "**" for a in call.args),
            )
            if bound.ok:
                site.notes.append(f"not needed for this vLLM: {site.short_callee}(...) binds as it is")
                return call
        site.notices.append(spec.message)
        return call

    return [rewrite]


def _describe(spec: Notice) -> str:
    about = f" (unless `{'`, `'.join(spec.missing)}` passed)" if spec.missing else ""
    return f"notice{about}"


OPERATION = Operation(
    name="notice",
    keys=("notice", "missing"),
    parse=parse,
    compile=compile_spec,
    describe=_describe,
    guardable=True,
    observes=True,
)

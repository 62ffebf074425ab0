"""The sentences for a binding result and an existence answer: what `signatures` answers as
data (`BindResult`, `Existence`), said once, here. Below `analysis/` (whose verdicts carry these
reasons) so nothing imports upward; `report/binding.py` re-exports them for rendering."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .model import BindResult, Existence

_KEYWORD_PROBLEMS = {
    "multiple": "multiple values for argument {name!r}",
    "positional_only": "positional-only argument {name!r} passed as keyword",
}


def bind_reason(result: BindResult) -> str:
    """Every problem of a call in one reason ("unexpected keyword argument 'a'; missing required
    argument 'b'"); "" when it binds."""
    if result.too_many is not None:
        given, accepted = result.too_many
        return f"too many positional arguments ({given} given, {accepted} accepted)"
    if result.splat:
        return "*args/**kwargs at the call"
    problems = [_KEYWORD_PROBLEMS[what].format(name=name) for what, name in result.keyword_problems]
    problems += [f"{what}{'s' if len(names) > 1 else ''} {', '.join(repr(n) for n in names)}"
                 for what, names in (("unexpected keyword argument", result.unexpected),
                                     ("missing required argument", result.missing)) if names]
    return "; ".join(problems)


def existence_reason(found: Existence, imported: bool = False) -> str:
    """Why a name is not there; for a `from ... import name` (`imported`) that is missing, where a
    public module of this vLLM defines the name now, or that none does."""
    if not imported or found.found is not False:
        return found.reason
    name = found.name.rpartition(".")[2]
    if found.moved_to:
        return f"{found.reason}; {name} is in {', '.join(found.moved_to)} now"
    return f"{found.reason}; no public module of this vLLM defines {name}"

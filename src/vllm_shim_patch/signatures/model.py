"""The shape of a signature and how a call binds to it, shared by every source.

Both sources, and the guard and verifier that use them, agree on these types and on the
parameter kinds (`inspect.Parameter.kind` names in lower case, so a live answer and a static one
compare equal).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from vllm_shim_patch.kinds import BindStatus, Word

__all__ = [
    "IGNORED_EXTRA",
    "KW_ONLY",
    "PARAM_KINDS",
    "POS_ONLY",
    "POS_OR_KW",
    "VAR_KW",
    "VAR_POS",
    "BindResult",
    "Existence",
    "Presence",
    "Param",
    "Signature",
    "SignatureSource",
]

POS_ONLY, POS_OR_KW, VAR_POS, KW_ONLY, VAR_KW = (
    "positional_only",
    "positional_or_keyword",
    "var_positional",
    "keyword_only",
    "var_keyword",
)
PARAM_KINDS = (POS_ONLY, POS_OR_KW, VAR_POS, KW_ONLY, VAR_KW)
# The catch-all both sources write for a pydantic dataclass that ignores unknown keywords.
IGNORED_EXTRA = "ignored_extra"


@dataclass(frozen=True)
class Param:
    name: str
    kind: str  # one of PARAM_KINDS: inspect.Parameter.kind.name.lower()
    required: bool
    # The default as source text ("True", "None"), where a literal says it; None when there is
    # none or it is computed (a factory). Guards on a changed default compare this text.
    default: str | None = field(default=None, compare=False)


# What went wrong with one keyword of a call, in the order the call names them.
MULTIPLE, POSITIONAL_AS_KEYWORD = "multiple", "positional_only"


@dataclass(frozen=True)
class BindResult:
    """How a call binds, as data: the status and every problem (`signatures.words.bind_reason`
    renders them as one sentence)."""

    status: BindStatus
    unexpected: tuple[str, ...] = ()  # keywords no parameter takes
    missing: tuple[str, ...] = ()  # required parameters nothing fills
    # (MULTIPLE | POSITIONAL_AS_KEYWORD, keyword), in the call's keyword order
    keyword_problems: tuple[tuple[str, str], ...] = ()
    too_many: tuple[int, int] | None = None  # (positionals given, accepted): the reading stopped
    splat: bool = False  # unknown because of *args/**kwargs at the call

    @property
    def ok(self) -> bool:
        return self.status is BindStatus.OK

    @property
    def multiple(self) -> tuple[str, ...]:
        """Arguments given more than one value."""
        return tuple(name for what, name in self.keyword_problems if what == MULTIPLE)

    @property
    def positional_only(self) -> tuple[str, ...]:
        """Positional-only parameters passed as keywords."""
        return tuple(name for what, name in self.keyword_problems if what == POSITIONAL_AS_KEYWORD)


_OK = BindResult(BindStatus.OK)


class Presence(Word):
    """What the source says of a name (griffe's breakage kinds, for one name)."""

    PRESENT = "present"
    MISSING = "missing"
    MOVED = "moved"  # missing where it was asked for; public modules define it now (`moved_to`)
    UNKNOWN = "unknown"  # the source cannot tell (`reason` says why)


@dataclass(frozen=True)
class Existence:
    """Whether `name` (a module, or an attribute of one or of a class) exists in a vLLM source."""

    kind: Presence
    name: str
    reason: str = ""  # why it is not present ("" when it is)
    moved_to: tuple[str, ...] = ()  # MOVED: the modules that define it now, shortest first

    @property
    def found(self) -> bool | None:
        """True (present), False (missing or moved) or None (unknown)."""
        return True if self.kind is Presence.PRESENT else None if self.kind is Presence.UNKNOWN else False

    @property
    def answer(self) -> tuple[bool | None, str]:
        return self.found, self.reason

    @property
    def module(self) -> str:
        """The module part of `name` as asked (`a.b` of `a.b.Name`)."""
        return self.name.rpartition(".")[0]


@dataclass(frozen=True)
class Signature:
    qualname: str
    params: tuple[Param, ...]  # a class: its constructor's, without self
    origin: str  # "vllm/v1/request.py:59" (static) or "live"

    def _param(self, name: str) -> Param | None:
        return next((p for p in self.params if p.name == name), None)

    def _has(self, kind: str) -> bool:
        return any(p.kind == kind for p in self.params)

    def accepts(self, name: str) -> bool:
        """Whether a keyword argument of that name binds (a **kwargs takes any name)."""
        param = self._param(name)
        if param is not None and param.kind in (POS_OR_KW, KW_ONLY):
            return True
        return self._has(VAR_KW)

    def takes(self, name: str) -> bool:
        """Whether keyword `name` binds and has an effect: accepted, and not only to be dropped.
        What the rules' guards ask (adding an argument pydantic would drop is not a fix)."""
        return self.accepts(name) and not self.ignores(name)

    def ignores(self, name: str) -> bool:
        """Whether keyword `name` binds only to be dropped: a pydantic dataclass with
        extra="ignore" (vLLM's configs before 0.16) takes unknown keywords without error, and
        without effect. Both sources name that catch-all `ignored_extra`."""
        param = self._param(name)
        if param is not None and param.kind in (POS_OR_KW, KW_ONLY):
            return False
        return any(p.kind == VAR_KW and p.name == IGNORED_EXTRA for p in self.params)

    def default_of(self, name: str) -> str | None:
        """The literal default of parameter `name` as source text, or None (none, computed, absent)."""
        param = self._param(name)
        return param.default if param is not None else None

    def requires(self, name: str) -> bool:
        """Whether that parameter exists and has no default."""
        param = self._param(name)
        return param is not None and param.required

    def bind(
        self,
        n_positional: int,
        keywords: Sequence[str],
        star_args: bool = False,
        star_kwargs: bool = False,
    ) -> BindResult:
        """Check a call (`n_positional` positionals, these keyword names) against the signature.

        A `*args`/`**kwargs` splat at the call leaves the result "unknown" unless the explicit
        arguments already fail. Every problem is reported, as data (`unexpected`, `missing`,
        `keyword_problems`), so one reading names every change the call needs; only a positional
        surplus stops the reading (which parameter each fills is unknown).
        """
        positional = [p for p in self.params if p.kind in (POS_ONLY, POS_OR_KW)]
        if n_positional > len(positional) and not self._has(VAR_POS):
            return BindResult(BindStatus.MISMATCH, too_many=(n_positional, len(positional)))
        filled = {p.name for p in positional[:n_positional]}
        by_keyword = {p.name: p for p in self.params if p.kind in (POS_OR_KW, KW_ONLY)}
        seen: set[str] = set()
        unexpected: list[str] = []
        problems: list[tuple[str, str]] = []
        reported: set[str] = set()  # a positional-only parameter named as a keyword: not "missing" too
        for name in keywords:
            if name in seen or (name in filled and name in by_keyword):
                problems.append((MULTIPLE, name))
                continue
            seen.add(name)
            if name in by_keyword or self._has(VAR_KW):
                continue
            param = self._param(name)
            if param is not None and param.kind == POS_ONLY:
                problems.append((POSITIONAL_AS_KEYWORD, name))
                reported.add(name)
                continue
            unexpected.append(name)

        def unfilled(p: Param) -> bool:
            if not p.required or p.name in filled or p.name in reported:
                return False
            if p.kind == POS_ONLY:
                return not star_args  # a keyword, even from **kwargs, cannot fill it
            if p.name in seen:
                return False
            return not star_kwargs if p.kind == KW_ONLY else not (star_args or star_kwargs)

        missing = [p.name for p in self.params if unfilled(p)]
        if problems or unexpected or missing:
            return BindResult(BindStatus.MISMATCH, tuple(unexpected), tuple(missing), tuple(problems))
        if star_args or star_kwargs:
            return BindResult(BindStatus.UNKNOWN, splat=True)
        return _OK


class SignatureSource(Protocol):
    kind: str  # "live" | "static"

    def get(self, qualname: str) -> Signature | None:
        """The signature, or None when it cannot be decided."""
        ...

    def get_many(self, qualnames: Iterable[str]) -> dict[str, Signature | None]: ...

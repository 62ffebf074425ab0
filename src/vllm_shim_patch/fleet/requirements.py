"""speculators' `Requires-Dist` made to resolve beside the vLLM the patch is for.

speculators 0.4.x caps transformers at 4.57.6 and torch at 2.10.0, while vLLM 0.33.0 requires
transformers>=5.16.1,<5.21.0 and torch==2.14.0: with both requirements no resolver finds a
solution, though the patched package runs there. A requirement of ours whose versions and vLLM's
own requirement on the same distribution cannot meet is relaxed: each of its clauses that no
version vLLM allows satisfies is dropped, nothing else (`transformers<=4.57.6,>=4.56.1` against
`transformers<5.21.0,>=5.16.1` keeps `>=4.56.1`). A `vllm` requirement of speculators' own (the
`datagen` extra's `vllm==0.11.0`) becomes the series' one, and an unconditional `vllm`
requirement for the series is added.

Whether two specifier sets can meet is decided on their bounds (`==`, `===`, `~=`, `<`, `<=`,
`>`, `>=`, prefix matches); an exclusion (`!=`) never makes them disjoint here.
"""

from __future__ import annotations

from dataclasses import dataclass

from packaging.markers import Marker
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import Specifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from ..errors import UsageError

_LOWEST = Version("0.dev0")


@dataclass(frozen=True)
class Bound:
    """One side of an interval of versions: None is unbounded."""

    version: Version | None
    inclusive: bool


@dataclass(frozen=True)
class Interval:
    low: Bound = Bound(None, False)
    high: Bound = Bound(None, False)

    def meet(self, other: Interval) -> Interval:
        return Interval(_tighter(self.low, other.low, low=True), _tighter(self.high, other.high, low=False))

    @property
    def empty(self) -> bool:
        lo, hi = self.low, self.high
        if lo.version is None or hi.version is None:
            return False
        return lo.version > hi.version or (lo.version == hi.version and not (lo.inclusive and hi.inclusive))


def _tighter(a: Bound, b: Bound, *, low: bool) -> Bound:
    if a.version is None:
        return b
    if b.version is None:
        return a
    if a.version == b.version:
        return Bound(a.version, a.inclusive and b.inclusive)
    return (a if a.version > b.version else b) if low else (a if a.version < b.version else b)


def _prefix_bounds(prefix: str) -> Interval:
    """`==0.16.*`: from 0.16.dev0 up to, not including, 0.17.dev0."""
    release = [int(p) for p in Version(prefix).release]
    upper = [*release[:-1], release[-1] + 1]
    return Interval(Bound(Version(".".join(map(str, release)) + ".dev0"), True),
                    Bound(Version(".".join(map(str, upper)) + ".dev0"), False))


def interval(spec: Specifier) -> Interval:
    """The versions one clause allows, as bounds (an exclusion or an unparsable one: all)."""
    op, text = spec.operator, spec.version
    try:
        if op == "==" and text.endswith(".*"):
            return _prefix_bounds(text[:-2])
        version = Version(text)
    except InvalidVersion:
        return Interval()
    if op in ("==", "==="):
        point = Version(version.public)
        return Interval(Bound(point, True), Bound(point, True))
    if op == "~=":
        release = version.release
        return _prefix_bounds(".".join(map(str, release[:-1]))).meet(Interval(Bound(version, True)))
    if op in (">=", ">"):
        return Interval(Bound(version, op == ">="))
    if op in ("<=", "<"):
        return Interval(Bound(None, False), Bound(version, op == "<="))
    return Interval()  # "!=": excludes a point or a prefix, never a range


def allowed(specifiers: SpecifierSet) -> Interval:
    out = Interval(Bound(_LOWEST, True))
    for spec in specifiers:
        out = out.meet(interval(spec))
    return out


def meets(ours: SpecifierSet, theirs: SpecifierSet) -> bool:
    """Whether some version satisfies both sets (as far as their bounds tell)."""
    return not allowed(ours).meet(allowed(theirs)).empty


@dataclass(frozen=True)
class Rewritten:
    """One requirement line changed: as published, as the patched wheel has it, and why."""

    before: str
    after: str
    name: str  # canonical distribution name
    vllm_requires: str  # what vLLM requires of it ("" for the vllm requirement itself)
    dropped: tuple[str, ...] = ()  # the clauses taken out

    def as_dict(self) -> dict[str, object]:
        return {"before": self.before, "after": self.after, "distribution": self.name,
                "vllm_requires": self.vllm_requires, "dropped": list(self.dropped)}


def parse(line: str, where: str) -> Requirement:
    try:
        return Requirement(line)
    except InvalidRequirement as exc:
        raise UsageError(f"{where}: cannot read the requirement {line!r} ({exc})") from None


def _with(req: Requirement, specifier: SpecifierSet) -> str:
    out = Requirement(str(req))
    out.specifier = specifier
    return str(out)


def _for_extra(marker: Marker | None) -> bool:
    return marker is not None and "extra" in str(marker)


def vllm_constraints(vllm_requires: list[str]) -> dict[str, SpecifierSet]:
    """vLLM's requirements on each distribution (an extra's left out), the clauses of all its
    lines on one name together (a marker's too: an install somewhere may meet it)."""
    out: dict[str, SpecifierSet] = {}
    for line in vllm_requires:
        req = parse(line, "vLLM's METADATA")
        if _for_extra(req.marker):
            continue
        name = canonicalize_name(req.name)
        out[name] = out.get(name, SpecifierSet()) & req.specifier
    return out


def relax(line: str, theirs: SpecifierSet) -> Rewritten | None:
    """`line` with the clauses dropped that no version `theirs` allows meets (None: they meet)."""
    req = parse(line, "the original METADATA")
    if meets(req.specifier, theirs):
        return None
    fence = allowed(theirs)
    kept = [s for s in req.specifier if not interval(s).meet(fence).empty]
    if not meets(SpecifierSet(",".join(str(s) for s in kept)), theirs):
        kept = []
    dropped = tuple(sorted(str(s) for s in req.specifier if s not in kept))
    after = _with(req, SpecifierSet(",".join(str(s) for s in kept)))
    return Rewritten(line, after, canonicalize_name(req.name), str(theirs), dropped)


def rewrite(requires: list[str], vllm_requires: list[str] | None, series_requirement: str
            ) -> tuple[list[list[str]], list[Rewritten]]:
    """What each of the original `Requires-Dist` values becomes (a list per value: none for an
    unconditional `vllm` requirement, which the series' replaces; the series' own is added after
    the last unconditional value, or first when there is none), and what changed.

    `vllm_requires`: vLLM's own `Requires-Dist` (None: not known, nothing is relaxed)."""
    theirs = vllm_constraints(vllm_requires) if vllm_requires is not None else {}
    series = parse(series_requirement, "the series requirement")
    out: list[list[str]] = []
    changed: list[Rewritten] = []
    last_plain = -1
    for line in requires:
        req = parse(line, "the original METADATA")
        name = canonicalize_name(req.name)
        if name == "vllm":
            if not _for_extra(req.marker):
                changed.append(Rewritten(line, series_requirement, name, ""))
                out.append([])
                last_plain = len(out) - 1
                continue
            after = _with(req, series.specifier)
            if after != line:
                changed.append(Rewritten(line, after, name, ""))
            out.append([after])
            continue
        done = relax(line, theirs[name]) if name in theirs and not _for_extra(req.marker) else None
        if done is not None:
            changed.append(done)
        out.append([done.after if done is not None else line])
        if not _for_extra(req.marker):
            last_plain = len(out) - 1
    if last_plain >= 0:
        out[last_plain].append(series_requirement)
    elif out:
        out[0].insert(0, series_requirement)
    else:
        out.append([series_requirement])
    return out, changed


def flat(replacements: list[list[str]]) -> list[str]:
    return [line for lines in replacements for line in lines]

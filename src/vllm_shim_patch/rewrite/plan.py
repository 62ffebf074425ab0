"""The plan: which rules apply to the target's vLLM, and what the engine would write."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from packaging.version import Version

from ..errors import UsageError
from .rule import Rule, RulePack
from ..kinds import Action, FileStatus, SignatureKind
from ..target import Target
from ..versions import in_series, parse_version, resolve_version
from .results import FileResult, Site

if TYPE_CHECKING:
    from .plancache import PlanCache

__all__ = ["Plan", "in_series", "make_plan", "parse_version", "resolve_version"]


def select_version(target: Target, pack: RulePack, requested: str | None, *, guarded: bool,
                   source: tuple[str, str | None] | None = None) -> tuple[Version, str | None]:
    """`resolve_version`, refused when no rule applies: callers run it before their first write.

    `source`: the --vllm-source path and the version it carries, which selects the rules when no
    --vllm-version is given (and must agree with one that is)."""
    version, note = resolve_version(requested, target.vllm_version, target.python, source)
    candidates = [r for r in pack.rules if r.since <= version]
    if not candidates and not guarded:
        earliest = min(r.since for r in pack.rules) if pack.rules else None
        raise UsageError(
            f"no rule applies to vLLM {version} (the earliest rule is for {earliest})"
            if earliest
            else "no rules loaded"
        )
    return version, note


@dataclass(frozen=True)
class Plan:
    target: Target
    version: Version
    version_note: str | None
    signature_kind: SignatureKind | None  # None: unguarded
    rules: tuple[Rule, ...]
    results: tuple[FileResult, ...]
    cached: bool = False  # read from the plan cache, not made by the engine in this run

    @property
    def changed(self) -> list[FileResult]:
        return [r for r in self.results if r.changed]

    @property
    def problems(self) -> list[FileResult]:
        return [r for r in self.results if r.status in (FileStatus.SKIPPED, FileStatus.FAILED)]

    @property
    def sites(self) -> list[Site]:
        return [s for r in self.results for s in r.sites]

    @property
    def needs_human(self) -> list[Site]:
        return [s for s in self.sites if s.action is Action.NEEDS_HUMAN]

    @property
    def edited(self) -> list[Site]:
        return [s for s in self.sites if s.action is Action.EDITED]

    @property
    def rule_ids(self) -> list[str]:
        seen = dict.fromkeys(s.rule_id for s in self.edited)
        return list(seen)

    @property
    def notices(self) -> list[Site]:
        return [s for s in self.sites if s.action is Action.NOTICE]

    @property
    def clean(self) -> bool:
        """Every file handled, no site left for a human, no notice raised."""
        return not self.problems and not self.needs_human and not self.notices


def make_plan(
    target: Target,
    pack: RulePack,
    requested: str | None,
    signatures: Mapping[str, Any] | None = None,
    signature_kind: SignatureKind | None = None,
    files: Mapping[str, bytes] | None = None,
    declined: frozenset[tuple[str, int, str]] = frozenset(),
    facts: Mapping[str, bool | None] | None = None,
    source: tuple[str, str | None] | None = None,
    cache: PlanCache | None = None,
    reuse: bool = False,
) -> Plan:
    """Run the engine over the package's files (or over `files`, e.g. the overlay's originals).

    `source`: the --vllm-source path and the version it carries, which selects the rules when no
    --vllm-version is given (and must agree with one that is). `cache`: the plan of `files` is
    stored there, and with `reuse` taken from there when every input is the same (no engine,
    no libcst: rewrite/plancache.py)."""
    version, note = select_version(target, pack, requested, guarded=signatures is not None, source=source)
    key = None
    if cache is not None and files is not None:
        from .plancache import plan_key

        key = plan_key(target=target, rules=pack.rules, version=version, signatures=signatures,
                       kind=signature_kind, facts=facts, declined=declined, files=files)
        cached = cache.get(key, files) if key is not None and reuse else None
        if cached is not None:
            return Plan(target, version, note, signature_kind, pack.rules, tuple(cached), cached=True)
    from .engine import Engine
    from .grammar import TargetGrammar
    from .parallel import transform_all

    engine = Engine(pack.rules, version, signatures, declined, facts, compile_here=False)
    grammar = TargetGrammar(target)  # started now: its start-up overlaps the engine's work
    try:
        if files is None:
            results = engine.run(target.location, target.python_files())
        else:
            results = transform_all(engine, sorted(files.items()))
        results = grammar.check(results)
    finally:
        grammar.close()
    if cache is not None and key is not None and not any(r.status is FileStatus.FAILED for r in results):
        # A failure may be the machine's (a codemod past its time limit under load): never kept.
        cache.put(key, results)
    return Plan(target, version, note, signature_kind, pack.rules, tuple(results))

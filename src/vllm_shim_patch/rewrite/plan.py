"""The plan: which rules apply to the target's vLLM, and what the engine would write."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from packaging.version import InvalidVersion, Version

from ..errors import TargetError, UsageError
from ..rules.model import Rule, RulePack
from ..settings import Action, FileStatus, SignatureKind
from ..target import Target
from .engine import Engine, FileResult, Site


def parse_version(text: str, what: str) -> Version:
    try:
        return Version(text)
    except InvalidVersion:
        raise UsageError(f"{what} {text!r} is not a version like 0.16 or 0.16.1.dev45+g1a2b3c4") from None


def resolve_version(requested: str | None, installed: str | None, python: str) -> tuple[Version, str | None]:
    """The vLLM version rules are selected for, and a note when request and install disagree.

    `--vllm-version 0.16` names a series; a nightly such as 0.16.1.dev45+g1a2b3c4.cu129 is in it.
    """
    if requested is None:
        if installed is None:
            raise TargetError(f"no vLLM installed in {python}: pass --vllm-version (e.g. --vllm-version 0.16)")
        return parse_version(installed, "installed vLLM version"), None
    wanted = parse_version(requested, "--vllm-version")
    if installed is None:
        return wanted, f"vLLM is not installed in {python}: rules selected for --vllm-version {requested} alone"
    have = parse_version(installed, "installed vLLM version")
    series = wanted.release
    head = have.release[: len(series)]
    if head + (0,) * (len(series) - len(head)) != series:
        return wanted, (
            f"--vllm-version {requested} does not match the installed vLLM {installed}: "
            f"rules selected for {requested}; signature guards follow what is installed"
        )
    return wanted, None


def select_version(target: Target, pack: RulePack, requested: str | None, *,
                   guarded: bool) -> tuple[Version, str | None]:
    """`resolve_version`, refused when no rule applies: callers run it before their first write."""
    version, note = resolve_version(requested, target.vllm_version, target.python)
    if note and target.vllm_version is None and guarded:
        note = f"vLLM is not installed in {target.python}: guards read the vLLM source given with --vllm-source"
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
) -> Plan:
    """Run the engine over the package's files (or over `files`, e.g. the overlay's originals)."""
    version, note = select_version(target, pack, requested, guarded=signatures is not None)
    engine = Engine(pack.rules, version, signatures, declined, facts)
    if files is None:
        results = engine.run(target.location, target.python_files())
    else:
        results = [engine.transform(data, path) for path, data in sorted(files.items())]
    return Plan(target, version, note, signature_kind, pack.rules, tuple(results))

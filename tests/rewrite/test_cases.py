"""The engine's string-in/string-out cases, kept as rule files in cases/ and run like rule examples."""

from __future__ import annotations

from pathlib import Path

import pytest

from vllm_shim_patch.rewrite.engine import Engine
from vllm_shim_patch.rules import Rule
from vllm_shim_patch.rules.loader import load_pack
from vllm_shim_patch.rules.testing import Case, cases, run_case

CASE_FILES = sorted((Path(__file__).parent / "cases").glob("*.yaml"))
PACK = load_pack(CASE_FILES, bundled=False)
CASES = cases(PACK.rules)

# Examples (each with its no-op twin) and unchanged cases per file. A file that silently loads
# fewer cases, or a new file, fails test_case_count until this table says so.
EXPECTED = {
    "codemod.yaml": (1, 2),
    "layout.yaml": (18, 0),
    "matching.yaml": (10, 7),
    "operations.yaml": (30, 3),
}


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_case(case: Case) -> None:
    result = run_case(case)
    assert result.problem == "", result.diff()
    assert result.actual == case.expected
    status = Engine([case.rule]).transform(case.source.encode(), f"<{case.id}>").status
    assert status == ("unchanged" if case.source == case.expected else "changed")


@pytest.mark.parametrize("rule", PACK.rules, ids=[r.id for r in PACK.rules])
def test_every_case_rule_has_examples(rule: Rule) -> None:
    assert rule.examples, f"{rule.path}: rule {rule.id} has no before/after example"


def test_case_count() -> None:
    counted = {
        path.name: (
            sum(len(r.examples) for r in PACK.rules if Path(r.path) == path),
            sum(len(r.unchanged) for r in PACK.rules if Path(r.path) == path),
        )
        for path in CASE_FILES
    }
    assert counted == EXPECTED
    assert len(CASES) == sum(2 * n_examples + n_unchanged for n_examples, n_unchanged in EXPECTED.values())
    assert len({c.id for c in CASES}) == len(CASES)

"""The before/after examples embedded in the bundled rules, run as tests (the `rules test` harness)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from packaging.version import Version

from vllm_shim_patch.cli import main
from vllm_shim_patch.rewrite.engine import Engine
from vllm_shim_patch.rules import Rule
from vllm_shim_patch.rules.loader import load_pack
from vllm_shim_patch.rules.testing import Case, cases, run_case
from vllm_shim_patch.signatures.model import Param, Signature

PACK = load_pack()
CASES = cases(PACK.rules)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_example(case: Case) -> None:
    result = run_case(case)
    assert result.problem == "", result.diff()
    assert result.actual == case.expected


def test_cases_ran() -> None:
    # A parametrized test over an empty list is skipped, not failed: say so here.
    assert CASES, "no rule example was collected"
    assert len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("rule", PACK.rules, ids=[r.id for r in PACK.rules])
def test_every_bundled_rule_has_examples_and_an_unchanged_case(rule: Rule) -> None:
    assert rule.examples, "no before/after example"
    assert rule.unchanged, "no unchanged case (another module's callable, an already migrated call)"


def test_case_ids() -> None:
    rule = PACK.by_id("request-drop-eos-token-id")
    assert [c.id for c in cases([rule])] == [
        "request-drop-eos-token-id-example-1",
        "request-drop-eos-token-id-noop-1",
        "request-drop-eos-token-id-example-2",
        "request-drop-eos-token-id-noop-2",
        "request-drop-eos-token-id-unchanged-1",
        "request-drop-eos-token-id-unchanged-2",
    ]


def test_rules_test_cli_bundled() -> None:
    result = CliRunner().invoke(main, ["rules", "test"])
    assert (result.exit_code, result.stdout, result.stderr) == (
        0,
        f"{len(CASES)} examples ok, 0 failing\n",
        "",
    )


WRONG = """\
schema: 1
rules:
  - id: wrong-example
    call: m.X
    since: "0.12"
    drop: [eos]
    why: w
    examples:
      - before: |
          from m import X
          X(a, eos=1)
        after: |
          from m import X
          X(a, eos=2)
    unchanged:
      - |
        from other import X
        X(a, eos=1)
"""


def test_rules_test_cli_wrong_example(tmp_path: Path) -> None:
    rule_file = tmp_path / "wrong.yaml"
    rule_file.write_text(WRONG)
    result = CliRunner().invoke(main, ["rules", "test", str(rule_file)])
    diff = "--- expected\n+++ actual\n@@ -1,2 +1,2 @@\n from m import X\n-X(a, eos=2)\n+X(a)\n"
    assert (result.exit_code, result.stderr) == (1, "")
    assert result.stdout == (
        f"FAIL wrong-example-example-1 ({rule_file}): output differs from the expected code\n{diff}"
        f"FAIL wrong-example-noop-1 ({rule_file}): output differs from the expected code\n{diff}"
        "1 example ok, 2 failing\n"
    )


def test_rules_test_cli_no_examples(tmp_path: Path) -> None:
    rule_file = tmp_path / "bare.yaml"
    rule_file.write_text(
        "schema: 1\nrules:\n  - id: bare\n    call: m.X\n    since: '0.1'\n    drop: [a]\n    why: w\n"
    )
    result = CliRunner().invoke(main, ["rules", "test", str(rule_file)])
    assert (result.exit_code, result.stdout) == (
        1,
        "no examples to run\n0 examples ok, 0 failing\n",
    )


def test_needs_human_is_explained_in_the_problem(tmp_path: Path) -> None:
    rule_file = tmp_path / "splat.yaml"
    rule_file.write_text(
        WRONG.replace("X(a, eos=1)\n        after", "X(*a, eos=1)\n        after").replace(
            "eos=2", "eos=1"
        )
    )
    (case, *_) = cases(load_pack([rule_file], bundled=False).rules)
    result = run_case(case)
    assert result.problem == (
        "output differs from the expected code; "
        "line 2: needs-human: *args/**kwargs at the call: cannot tell which arguments it passes"
    )


def test_readme_rule_table_is_current() -> None:
    from vllm_shim_patch.report.rules import table

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    block = readme.split("<!-- rules:start -->\n", 1)[1].split("<!-- rules:end -->", 1)[0]
    assert block == table(load_pack().rules), "run: patch-speculators rules docs"


LAYOUT_RULE = next(r for r in PACK.rules if r.id == "kv-cache-resolve-layout")
SET_LAYOUT = "vllm.v1.executor.multiproc_executor.MultiprocExecutor.set_kv_cache_layout"
LAYOUT_FACTS = {name: True for name in LAYOUT_RULE.guard.defines}


def _set_layout(*params: str) -> Signature:
    return Signature(SET_LAYOUT, tuple(Param(p, "positional_or_keyword", True) for p in params), "abstract.py:1")


@pytest.mark.parametrize(("params", "call"), [
    (("layout_name", "cp_kv_cache_interleave_size"),
     "self.executor.set_kv_cache_layout(\n"
     "            kv_cache_layout.name, self.vllm_config.parallel_config.cp_kv_cache_interleave_size\n"
     "        )\n"),
    (("layout_name",), "self.executor.set_kv_cache_layout(kv_cache_layout.name)\n"),
], ids=["0.33-interleave-size", "0.29-to-0.32-layout-only"])
def test_kv_cache_resolve_layout_publishes_as_the_installed_executor_takes_it(params: tuple[str, ...],
                                                                               call: str) -> None:
    # vLLM 0.29-0.32 define the layout methods but set_kv_cache_layout(layout_name) alone: the
    # 0.33 call failed there with "takes 2 positional arguments but 3 were given".
    source = LAYOUT_RULE.examples[0].before
    engine = Engine([LAYOUT_RULE], version=Version("0.29.0"), facts=LAYOUT_FACTS,
                    signatures={SET_LAYOUT: _set_layout(*params)})
    result = engine.transform(source.encode(), "speculators/data_generation/vllm_hidden_states_generator.py")
    after = result.after.decode()
    assert ("        " + call) in after
    assert after.count("set_kv_cache_layout(") == 1
    assert ("vLLM 0.33+" in after) == (len(params) == 2)

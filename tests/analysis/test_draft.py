"""Draft rules from mismatches: which operation each gets, on a tiny vLLM source."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import write_tree

from vllm_shim_patch.analysis.audit import AuditRow, Checker, _check_file
from vllm_shim_patch.analysis.calls import scan_uses
from vllm_shim_patch.analysis.draft import drafts, render
from vllm_shim_patch.signatures.static.members import Members
from vllm_shim_patch.report.binding import bind_reason
from vllm_shim_patch.rules.loader import parse_rules
from vllm_shim_patch.signatures.model import MULTIPLE, POSITIONAL_AS_KEYWORD, BindResult
from vllm_shim_patch.signatures.static import StaticSignatures

TREE = {
    "vllm/__init__.py": b"",
    "vllm/api.py": b"def build(model_config, max_len=1, *, block_size):\n    pass\n"
                   b"def plain(a, b):\n    pass\n",
}
PACKAGE = b"""\
from vllm.api import build, plain
build(model_cfg=1, block_size=2)
build(model_config=1, max_len=2)
plain(1, 2, 3)
"""


def test_rename_drop_add_and_what_no_rule_can_say(tmp_path: Path) -> None:
    source = StaticSignatures(write_tree(tmp_path, TREE))
    uses = scan_uses(PACKAGE, "pkg/m.py")
    sigs = source.get_many({u.callee for u in uses if u.is_call})
    rows = [AuditRow(b, None, (), "") for b in _check_file(uses, Checker(sigs, "", Members(source.names)))]
    items, left = drafts(rows, sigs, "0.20", {"build-rename-model-cfg"})
    assert [(d.id, d.op, d.examples[0][1].splitlines()[1]) for d in items] == [
        ("build-rename-model-cfg-2", "rename: {model_cfg: model_config}", "build(model_config=1, block_size=2)"),
        ("build-add-block-size", 'add: {block_size: "TODO: an expression"}',
         "build(model_config=1, max_len=2, block_size=TODO: an expression)"),
    ]
    assert [d.placeholders for d in items] == [0, 1]  # the values to fill in, as data
    assert left == ["pkg/m.py:4: call vllm.api.plain: too many positional arguments (3 given, 2 accepted)"]
    text = render(items, left, "0.20", "pkg 1.0", "pkg")
    filled = text.replace("TODO: an expression", "16")
    assert [r.id for r in parse_rules(filled)] == ["build-rename-model-cfg-2", "build-add-block-size"]


def test_one_rule_says_every_change_a_call_needs() -> None:
    from vllm_shim_patch.analysis.draft import operation

    bound = BindResult("mismatch", unexpected=("block_hasher", "cfg"), missing=("mm_inputs", "config"))
    assert bind_reason(bound) == ("unexpected keyword arguments 'block_hasher', 'cfg'; "
                                  "missing required arguments 'mm_inputs', 'config'")
    assert operation(bound) == (
        "drop-block_hasher-cfg-add-mm_inputs-config",
        'drop: [block_hasher, cfg]\nadd: {mm_inputs: "TODO: an expression", config: "TODO: an expression"}',
    )
    # A keyword renamed to a missing parameter is not also dropped, nor the parameter added.
    assert operation(bound, {"cfg": "config"}) == (
        "rename-cfg-drop-block_hasher-add-mm_inputs",
        'rename: {cfg: config}\ndrop: [block_hasher]\nadd: {mm_inputs: "TODO: an expression"}',
    )
    assert operation(None) is None  # not a binding problem: "instance of vllm.X has no attribute 'y'"


@pytest.mark.parametrize(("bound", "reason"), [
    pytest.param(BindResult("mismatch", missing=("b",), keyword_problems=((POSITIONAL_AS_KEYWORD, "x"),)),
                 "positional-only argument 'x' passed as keyword; missing required argument 'b'", id="posonly"),
    pytest.param(BindResult("mismatch", unexpected=("c",), keyword_problems=((MULTIPLE, "a"),)),
                 "multiple values for argument 'a'; unexpected keyword argument 'c'", id="multiple"),
    pytest.param(BindResult("mismatch", too_many=(3, 2)), "too many positional arguments (3 given, 2 accepted)",
                 id="too-many"),
])
def test_no_rule_for_a_call_a_rule_could_only_half_fix(bound: BindResult, reason: str) -> None:
    from vllm_shim_patch.analysis.draft import operation

    assert bind_reason(bound) == reason
    assert operation(bound) is None


def test_a_missing_argument_gets_an_add_with_a_placeholder() -> None:
    from vllm_shim_patch.analysis.draft import operation

    assert operation(BindResult("mismatch", missing=("b",))) == ("add-b", 'add: {b: "TODO: an expression"}')

"""Which use after the rules is which use before: a use the rules keep is paired with itself,
even where a rule inserts uses before it and a move renames what it calls (as
generator-kernel-block-size and the kv_cache_planning moves do to speculators 0.3.0 on vLLM
0.33), on a tiny vLLM source."""

from __future__ import annotations

from pathlib import Path

from conftest import write_tree

from vllm_shim_patch.analysis.audit import Checker, audit_plan
from vllm_shim_patch.analysis.calls import scan_uses
from vllm_shim_patch.kinds import Action, FileStatus
from vllm_shim_patch.rewrite.results import FileResult, Site
from vllm_shim_patch.signatures.static import StaticSignatures
from vllm_shim_patch.signatures.static.members import Members

TREE = {
    "vllm/__init__.py": b"",
    "vllm-9.9.9.dist-info/RECORD": b"vllm/__init__.py,,\nvllm/_C.abi3.so,sha256=x,1\n",  # the compiled files
    "vllm/old.py": b"def kept():\n    pass\n\n\ndef other():\n    pass\n",
    "vllm/new.py": b"class Plan:\n    num_blocks: int = 1\n\n\n"
                   b"def plan(n: int) -> Plan:\n    return Plan()\n\n\n"
                   b"def extra(n: int) -> int:\n    return n\n\n\ndef third():\n    pass\n",
}
PATH = "pkg/gen.py"
BEFORE = b"""\
from vllm.old import plan


def build(n):
    result = plan(n)
    return result.num_blocks
"""
# What a move of `plan` and a rule inserting code before its call leave.
AFTER = b"""\
from vllm.new import plan


def build(n):
    from vllm.new import extra
    n = extra(n)
    result = plan(n)
    return result.num_blocks
"""
MOVE = Site(rule_id="plan-move", path=PATH, line=5, end_line=5, callee="vllm.old.plan", action=Action.EDITED,
            message="move to vllm.new.plan", guarded=False, moves=("vllm.new.plan",))


def rows(tmp_path: Path, before: bytes, after: bytes, sites: tuple[Site, ...] = (MOVE,)) -> list[tuple[object, ...]]:
    source = StaticSignatures(write_tree(tmp_path, TREE))
    uses = {PATH: scan_uses(before, PATH)}
    after_uses = {PATH: scan_uses(after, PATH)}
    callees = {u.callee for group in (*uses.values(), *after_uses.values()) for u in group if u.is_call}
    checker = Checker(source.get_many(callees), "", Members(source.names), source)
    result = FileResult(PATH, FileStatus.CHANGED, before, after, sites)
    return [(r.before.call.line, r.before.call.kind, r.before.call.callee, str(r.before.status), r.before.reason,
             None if r.after is None else (r.after.call.line, r.after.call.callee, str(r.after.status)),
             r.rules, r.added, r.removed)
            for r in audit_plan([result], uses, after_uses, checker, "0.33")]


def test_a_moved_call_and_its_results_read_after_inserted_uses_are_paired_with_themselves(tmp_path: Path) -> None:
    see = "not bound: vllm.old has no name 'plan' (see the import)"
    assert rows(tmp_path, BEFORE, AFTER) == [
        (1, "import", "vllm.old.plan", "mismatch", "vllm.old has no name 'plan'; plan is in vllm.new now",
         (1, "vllm.new.plan", "ok"), ("plan-move",), False, False),
        (5, "call", "vllm.old.plan", "unknown", see, (7, "vllm.new.plan", "ok"), ("plan-move",), False, False),
        (6, "attribute", "vllm.old.plan.num_blocks", "unknown", see, (8, "vllm.new.plan.num_blocks", "ok"),
         (), False, False),
        # What the inserted code uses: added, checked like any other.
        (5, "import", "vllm.new.extra", "ok", "", (5, "vllm.new.extra", "ok"), (), True, False),
        (6, "call", "vllm.new.extra", "ok", "", (6, "vllm.new.extra", "ok"), (), True, False),
    ]


def test_a_use_on_a_line_the_rules_take_out_is_removed_and_what_they_write_into_a_line_is_added(
        tmp_path: Path) -> None:
    """What is not on a kept line is paired by kind and name: the moved import among the one the
    rules add on its line, the attribute read beside a call written into its line; the call on a
    line taken out is removed."""
    before = BEFORE + b"    plan(0)\n"
    after = BEFORE.replace(b"vllm.old import plan", b"vllm.new import extra, plan").replace(
        b"result.num_blocks", b"result.num_blocks, extra(1)")
    see = "not bound: vllm.old has no name 'plan' (see the import)"
    assert rows(tmp_path, before, after) == [
        (1, "import", "vllm.old.plan", "mismatch", "vllm.old has no name 'plan'; plan is in vllm.new now",
         (1, "vllm.new.plan", "ok"), ("plan-move",), False, False),
        (5, "call", "vllm.old.plan", "unknown", see, (5, "vllm.new.plan", "ok"), ("plan-move",), False, False),
        (6, "attribute", "vllm.old.plan.num_blocks", "unknown", see, (6, "vllm.new.plan.num_blocks", "ok"),
         (), False, False),
        (7, "call", "vllm.old.plan", "unknown", see, None, (), False, True),
        (1, "import", "vllm.new.extra", "ok", "", (1, "vllm.new.extra", "ok"), (), True, False),
        (6, "call", "vllm.new.extra", "ok", "", (6, "vllm.new.extra", "ok"), (), True, False),
    ]


# speculators 0.4.0's import on vLLM 0.33+: three of five names moved, the moves split the import in
# two, and the two names left lie on lines out of the kept lines' order.
SPLIT_BEFORE = b"""\
from vllm.old import (
    plan,
    extra,
    kept,
    other,
    third,
)
"""
SPLIT_AFTER = b"""\
from vllm.old import (
    kept,
    other,
)
from vllm.new import (
    plan,
    extra,
    third,
)
"""


def test_an_import_a_move_splits_is_paired_name_by_name(tmp_path: Path) -> None:
    gone = "vllm.old has no name '{0}'; {0} is in vllm.new now"
    got = [(line, callee, status, reason, after, rules, added, removed)
           for line, _, callee, status, reason, after, rules, added, removed
           in rows(tmp_path, SPLIT_BEFORE, SPLIT_AFTER, sites=())]
    assert got == [
        (2, "vllm.old.plan", "mismatch", gone.format("plan"), (6, "vllm.new.plan", "ok"), (), False, False),
        (3, "vllm.old.extra", "mismatch", gone.format("extra"), (7, "vllm.new.extra", "ok"), (), False, False),
        (4, "vllm.old.kept", "ok", "", (2, "vllm.old.kept", "ok"), (), False, False),
        (5, "vllm.old.other", "ok", "", (3, "vllm.old.other", "ok"), (), False, False),
        (6, "vllm.old.third", "mismatch", gone.format("third"), (8, "vllm.new.third", "ok"), (), False, False),
    ]

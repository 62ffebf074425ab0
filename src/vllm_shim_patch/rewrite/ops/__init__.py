"""The rule vocabulary: one file per operation, registered in one table.

To add an operation, write `NAME.py` defining ``OPERATION = Operation(...)`` (see `base.py`) and
add it to `OPERATIONS` below; the loader, the engine, the docs and the audit read it from here.
An operation imports libcst where it compiles a rewrite, never at module level: reading rules
(`rules check`, an audit answered from the plan cache) costs no libcst import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import add, codemod, drop, method, move, notice, pin, rename
from .base import Operation

if TYPE_CHECKING:
    from ..rule import Rule
    from ..context import Rewrite

# In the order rules list them (and `rules list` shows them).
OPERATIONS: dict[str, Operation] = {
    op.name: op
    for op in (drop.OPERATION, add.OPERATION, rename.OPERATION, move.OPERATION, notice.OPERATION,
               codemod.OPERATION, pin.OPERATION, method.OPERATION)
}

# The order a rule's rewrites run in: argument edits first (a rename before a drop, add or pin
# that may name the new parameter), then a codemod, then the callee's own name (move), and a
# notice last, so it judges the call as the others leave it. `method` is scoped: it never
# shares a rule with the call operations.
RUN_ORDER = ("rename", "drop", "add", "pin", "codemod", "move", "method", "notice")
assert set(RUN_ORDER) == set(OPERATIONS), "every operation needs its place in RUN_ORDER"


def compile_rule(rule: Rule) -> list[Rewrite]:
    """The rewrites of one rule, in RUN_ORDER."""
    rewrites: list[Rewrite] = []
    for name in sorted(rule.operations, key=RUN_ORDER.index):
        rewrites += OPERATIONS[name].compile(rule.op(name), rule)
    return rewrites


def guardable(rule: Rule) -> bool:
    """Every operation of the rule checks the installed signature before it acts."""
    return all(OPERATIONS[name].guardable for name in rule.operations)


def observes_only(rule: Rule) -> bool:
    return all(OPERATIONS[name].observes for name in rule.operations)


__all__ = ["OPERATIONS", "RUN_ORDER", "Operation", "compile_rule", "guardable", "observes_only"]

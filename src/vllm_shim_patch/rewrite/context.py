"""What a rewrite sees of the call it is given: the call-site context YAML operations and codemods share.

A rewrite is ``rewrite(call: libcst.Call, site: CallSite) -> libcst.Call``. It returns the call
unchanged when there is nothing to do, and raises ``NeedsHuman`` where the outcome would be a
guess (a splat, a positional argument it cannot name).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import libcst as cst

if TYPE_CHECKING:
    from .rule import Rule


class NeedsHuman(Exception):
    """The site cannot be rewritten with certainty: report it, change nothing."""


@dataclass
class CallSite:
    """One call a rule matched, and what the rule's rewrites found and did there."""

    rule: Rule
    callee: str  # the qualified name the call resolved to
    path: str
    line: int
    signature: Any = None  # the installed vLLM's Signature, when a source knows it
    notes: list[str] = field(default_factory=list)  # why parts were skipped ("not needed ...")
    notices: list[str] = field(default_factory=list)  # what a human must look at (notice rules)
    edits: list[str] = field(default_factory=list)
    moves: list[str] = field(default_factory=list)  # the targets of the `move`s among `edits`
    imports_to_add: list[tuple[str, str]] = field(default_factory=list)
    imports_to_remove: list[tuple[str, str]] = field(default_factory=list)
    guard_known: bool = False  # the rule's own guard (defines/lacks) was answered by the installed vLLM

    @property
    def guarded(self) -> bool:
        return self.signature is not None or self.guard_known

    @property
    def short_callee(self) -> str:
        return self.callee.rsplit(".", 1)[1]

    def arg_names(self, call: cst.Call) -> list[str | None]:
        """The parameter each argument binds to: keywords by name, positionals via the old signature."""
        if any(a.star for a in call.args):
            raise NeedsHuman("*args/**kwargs at the call: cannot tell which arguments it passes")
        sig = self.rule.signature
        names: list[str | None] = []
        position = 0
        for arg in call.args:
            if arg.keyword is not None:
                names.append(arg.keyword.value)
                continue
            if sig is not None and position < len(sig.positional):
                names.append(sig.positional[position])
            else:
                names.append(None)
            position += 1
        return names

    def unnamed_reason(self) -> str:
        if self.rule.signature is None:
            return "positional arguments at the call and no old 'signature' in the rule to name them"
        return f"more positional arguments than the old signature {self.rule.signature.text} names"


Rewrite = Callable[[cst.Call, CallSite], cst.Call]

_SAFE_TO_REPEAT = (cst.Name, cst.Attribute, cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString)


def repeatable(value: cst.BaseExpression) -> bool:
    """A value that can be copied or dropped without changing what runs: names, dotted names, literals."""
    if isinstance(value, cst.Attribute):
        node: cst.BaseExpression = value
        while isinstance(node, cst.Attribute):
            node = node.value
        return isinstance(node, cst.Name)
    return isinstance(value, _SAFE_TO_REPEAT)

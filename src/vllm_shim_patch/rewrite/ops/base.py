"""The shape of one operation: its YAML keys, how it reads them, what it does to a call."""

from __future__ import annotations

import keyword
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ...errors import RuleError
    from ..rule import OldSignature, Rule

# A fully qualified name such as vllm.v1.request.Request.
QUALNAME_RE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+")  # fullmatch only

# The YAML fields of one rule: key -> (key node, value node).
Fields = dict[str, tuple[Any, Any]]


class NodeReader(Protocol):
    """What an operation reads its YAML through (`rules.loader.NodeReader` is the one there is):
    values keep their line numbers, and `fail` names the file, the line and the rule."""

    path: str
    yaml: Any

    def fail(self, node: Any, message: str) -> RuleError: ...
    def mapping(self, node: Any, what: str) -> dict[str, tuple[Any, Any]]: ...
    def string(self, node: Any, what: str) -> str: ...
    def scalar(self, node: Any, what: str) -> str: ...
    def names(self, node: Any, what: str) -> list[tuple[str, Any]]: ...


def is_identifier(name: str) -> bool:
    """A name an argument can have (not a keyword)."""
    return name.isidentifier() and not keyword.iskeyword(name)


def _touches_nothing(spec: Any) -> tuple[str, ...]:
    return ()


@dataclass(frozen=True)
class Operation:
    """One verb of the rule vocabulary, named after what changed in the callee (griffe's breakages)."""

    name: str
    # The YAML keys it owns: its name first, then keys that only make sense beside it.
    keys: tuple[str, ...]
    # Read its keys into a spec; errors through `reader.fail(...)` name file, line and rule.
    # `parsed` holds the specs of the operations read before it in the same rule.
    parse: Callable[[NodeReader, Fields, dict[str, Any], OldSignature | None], Any]
    # What it makes of a spec: call rewrites, in the order they run (a `call:` rule), or
    # ScopedTransform classes (an `in:` rule).
    compile: Callable[[Any, Rule], list[Any]]
    # A short Markdown phrase for the generated rule docs.
    describe: Callable[[Any], str]
    # Every edit it makes consults the installed signature first: a signature may then apply it
    # on a vLLM earlier than its `since` (a nightly) or withhold it on a later one.
    guardable: bool
    # Only looks (a notice): runs after the operations that edit the call.
    observes: bool = False
    # The argument names it edits (one argument may be edited by one operation only).
    touches: Callable[[Any], tuple[str, ...]] = _touches_nothing
    # The kinds of rule it serves: "call" (matched by qualified name) and/or "scope" (`in:`).
    kinds: frozenset[str] = frozenset({"call"})
    # The guard its spec implies (e.g. the classes a renamed method lives on; a moved name's old
    # and new modules), as the fields of `rewrite.rule.Guard`, from the spec and the rule's calls.
    implied_guard: Callable[[Any, tuple[str, ...]], dict[str, tuple[Any, ...]]] | None = None

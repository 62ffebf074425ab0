"""libcst's `PositionProvider` map of a module, at a fraction of its cost, and the module's code.

`PositionProvider` generates the module's code once, updating a line and a column with a regular
expression at every one of its tokens (about 8 times the cost of `Module.code`); the engine asks
it once per module it transforms, for the lines of a few nodes. `positions` generates the code
once with the same hooks (`before_codegen`, `after_codegen`, `record_syntactic_position`)
recording token indices instead, and turns an index into a line and column only for a node that
is asked for, exactly as the provider counts them. The code comes with it (`Positions.code`), so
the same module is not generated twice.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import libcst as cst
from libcst._nodes.internal import CodegenState  # the base libcst's own PositionProvider builds on
from libcst.metadata import CodePosition, CodeRange, PositionProvider

_NEWLINE = re.compile(r"\r\n?|\n")  # the provider's own


@dataclass(frozen=False)
class _IndexState(CodegenState):
    starts: list[int] = field(default_factory=list)
    spans: dict[cst.CSTNode, tuple[int, int]] = field(default_factory=dict)
    popped: str = ""  # the module's trailing newline, counted by the provider before it goes
    # The provider's position does not go back when the trailing newline is taken off.
    extra: int = 0

    def before_codegen(self, node: cst.CSTNode) -> None:
        self.starts.append(len(self.tokens) + self.extra)

    def after_codegen(self, node: cst.CSTNode) -> None:
        start = self.starts.pop()
        if node not in self.spans:  # a syntactic position recorded already stands
            self.spans[node] = (start, len(self.tokens) + self.extra)

    # A plain context manager where the base has a generator one: the same protocol, no
    # generator made for each of the thousands of nodes that record one.
    def record_syntactic_position(  # type: ignore[override]
            self, node: cst.CSTNode, *, start_node: cst.CSTNode | None = None,
            end_node: cst.CSTNode | None = None) -> _Syntactic:
        return _Syntactic(self, node, start_node, end_node)

    def pop_trailing_newline(self) -> None:
        if self.tokens:
            self.popped = self.tokens[-1]
            self.extra = 1
        super().pop_trailing_newline()


class _Syntactic:
    """`record_syntactic_position` as the provider's, without a generator per node."""

    __slots__ = ("state", "node", "start_node", "end_node", "start")

    def __init__(self, state: _IndexState, node: cst.CSTNode, start_node: cst.CSTNode | None,
                 end_node: cst.CSTNode | None):
        self.state, self.node, self.start_node, self.end_node = state, node, start_node, end_node

    def __enter__(self) -> None:
        self.start = len(self.state.tokens) + self.state.extra

    def __exit__(self, *exc: object) -> None:
        state = self.state
        start = self.start if self.start_node is None else state.spans[self.start_node][0]
        end = len(state.tokens) + state.extra if self.end_node is None else state.spans[self.end_node][1]
        state.spans[self.node] = (start, end)


class Positions(Mapping[cst.CSTNode, CodeRange]):
    """node -> CodeRange, as `PositionProvider` gives it; `code`: the module's code."""

    def __init__(self, state: _IndexState):
        self._spans = state.spans
        self.code = "".join(state.tokens)
        tokens = [*state.tokens, state.popped] if state.popped else state.tokens
        self._text = self.code + state.popped
        self._offsets = list(itertools.accumulate(map(len, tokens), initial=0))
        self._tokens = tokens if "\r" in self._text else None  # "\r" alone ends a line too
        self._by_index: dict[int, CodePosition] = {}

    def _position(self, index: int) -> CodePosition:
        found = self._by_index.get(index)
        if found is None:
            found = self._by_index[index] = self._count(index)
        return found

    def _count(self, index: int) -> CodePosition:
        if self._tokens is None:
            offset = self._offsets[index]
            text = self._text
            return CodePosition(text.count("\n", 0, offset) + 1, offset - (text.rfind("\n", 0, offset) + 1))
        line, column = 1, 0
        for token in self._tokens[:index]:  # the provider's own count, token by token
            segments = _NEWLINE.split(token)
            if len(segments) == 1:
                column += len(token)
            else:
                line += len(segments) - 1
                column = len(segments[-1])
        return CodePosition(line, column)

    def __getitem__(self, node: cst.CSTNode) -> CodeRange:
        start, end = self._spans[node]
        return CodeRange(self._position(start), self._position(end))

    def __contains__(self, node: object) -> bool:
        return node in self._spans

    def __iter__(self) -> Iterator[cst.CSTNode]:
        return iter(self._spans)

    def __len__(self) -> int:
        return len(self._spans)


# The modules whose code was generated last, with what came of it (their Positions, or their
# code alone). A file's scoped rules ask the same module's code more than once (its positions
# for a transform's edits, its tokens for the imports it drops and the functions it unbinds): a
# code generation is the costliest step after the visits. A module is immutable and held here,
# so its identity cannot be reused while it is a key.
_RECENT: list[tuple[cst.Module, Positions | str]] = []
_KEEP = 4


def _recent(module: cst.Module) -> Positions | str | None:
    return next((found for held, found in _RECENT if held is module), None)


def _remember(module: cst.Module, found: Positions | str) -> None:
    _RECENT[:] = [(module, found), *[(m, f) for m, f in _RECENT if m is not module]][:_KEEP]


def positions(module: cst.Module) -> Positions:
    found = _recent(module)
    if isinstance(found, Positions):
        return found
    state = _IndexState(default_indent=module.default_indent, default_newline=module.default_newline)
    module._codegen(state)
    made = Positions(state)
    _remember(module, made)
    return made


def code(module: cst.Module) -> str:
    """`module.code`, from its positions or code when one of the last modules asked for."""
    found = _recent(module)
    if found is None:
        found = module.code
        _remember(module, found)
    return found.code if isinstance(found, Positions) else found


class LazyPositions(Mapping[Any, Any]):
    """A visitor's `metadata` holding only `PositionProvider`'s map, made on first use: a
    transform that records no edit never needs it."""

    def __init__(self, module: cst.Module):
        self.module = module
        self.found: Positions | None = None

    def __getitem__(self, key: Any) -> Positions:
        if key is not PositionProvider:
            raise KeyError(key)
        if self.found is None:
            self.found = positions(self.module)
        return self.found

    def __contains__(self, key: object) -> bool:
        return key is PositionProvider

    def __iter__(self) -> Iterator[Any]:
        return iter((PositionProvider,))

    def __len__(self) -> int:
        return 1

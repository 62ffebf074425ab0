"""Shapes of speculators' VllmHiddenStatesGenerator.generate that the data codemods share.

Not a codemod (no rule names it): the generator codemods load it by path beside themselves.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import libcst as cst

from vllm_shim_patch.rewrite.scoped import dotted, method_call

EXECUTOR = "self.executor"
SCHEDULER = "self.scheduler"


@dataclass(frozen=True)
class RequestLoop:
    """`for i, ids in enumerate(prompts): ... Request(request_id=EXPR, ...)`: where generate()
    makes its requests, and the code of each part (to build the ids the same way)."""

    index: int  # position of the loop in the function body
    target: str  # "i, ids"
    iter: str  # "enumerate(input_ids_list)"
    request_id: str  # 'f"req_{self._request_counter}_{i}"'
    prompt: str  # "ids": the prompt's token ids in the loop


def function_body(transform: Any, node: cst.FunctionDef) -> list[cst.BaseStatement] | None:
    """The statements of the transform's own function (None: another function, or a one-line body)."""
    if not transform.at_scope or not isinstance(node.body, cst.IndentedBlock):
        return None
    return list(node.body.body)


def _code(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node)


def _request_ids(node: cst.CSTNode) -> list[str]:
    """The code of every `request_id=` passed to a `Request(...)` inside `node`."""
    found: list[str] = []

    class Find(cst.CSTVisitor):
        def visit_Call(self, call: cst.Call) -> None:
            if (dotted(call.func) or "").rsplit(".", 1)[-1] == "Request":
                found.extend(_code(a.value) for a in call.args
                             if a.keyword is not None and a.keyword.value == "request_id")

    node.visit(Find())
    return found


def request_loop(body: list[cst.BaseStatement]) -> RequestLoop | None:
    for index, stmt in enumerate(body):
        if not isinstance(stmt, cst.For) or not isinstance(stmt.target, cst.Tuple):
            continue
        names = [e.value for e in stmt.target.elements]
        if len(names) != 2 or not all(isinstance(n, cst.Name) for n in names):
            continue
        found = _request_ids(stmt.body)
        if len(found) == 1:
            return RequestLoop(index, _code(stmt.target), _code(stmt.iter), found[0], names[1].value)
    return None


def step_loop(body: list[cst.BaseStatement]) -> tuple[int, cst.While, str] | None:
    """`while (so := self.scheduler.schedule()).total_num_scheduled_tokens > 0:` (speculators
    0.3.0's step loop): its position, the node, and the name of the scheduler output."""
    for index, stmt in enumerate(body):
        test = stmt.test if isinstance(stmt, cst.While) else None
        if not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1
                and isinstance(test.comparisons[0].operator, cst.GreaterThan)
                and isinstance(test.comparisons[0].comparator, cst.Integer)
                and test.comparisons[0].comparator.value == "0"):
            continue
        left = test.left
        if not (isinstance(left, cst.Attribute) and left.attr.value == "total_num_scheduled_tokens"
                and isinstance(left.value, cst.NamedExpr) and isinstance(left.value.target, cst.Name)
                and method_call(left.value.value, SCHEDULER, "schedule")):
            continue
        assert isinstance(stmt, cst.While)
        return index, stmt, left.value.target.value
    return None


def calls(node: cst.CSTNode, receiver: str, method: str) -> bool:
    found = False

    class Find(cst.CSTVisitor):
        def visit_Call(self, call: cst.Call) -> None:
            nonlocal found
            found = found or method_call(call, receiver, method) is not None

    node.visit(Find())
    return found


def rpc_named(node: cst.CSTNode, name: str) -> bool:
    """Whether `node` holds `self.executor.collective_rpc("NAME", ...)`."""
    found = False

    class Find(cst.CSTVisitor):
        def visit_Call(self, call: cst.Call) -> None:
            nonlocal found
            if method_call(call, EXECUTOR, "collective_rpc") and call.args:
                first = call.args[0].value
                found = found or (isinstance(first, cst.SimpleString) and first.evaluated_value == name)

    node.visit(Find())
    return found

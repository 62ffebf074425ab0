"""Use the single reply of `collective_rpc(..., unique_reply_rank=...)` as what it now is.

vLLM 0.11.0's MultiprocExecutor.collective_rpc returned `[reply]` for a unique reply rank; from
0.11.1 it returns the reply itself (`return responses[0] if output_rank is not None else
responses`). speculators 0.3.0 does `states = ...collective_rpc(..., unique_reply_rank=0)` then
`states[0]`, which now takes the first layer's tensor. Where every use of the variable is
`V[0]`, each becomes `V`; any other use is left for a human.
"""

from __future__ import annotations

import libcst as cst

from vllm_shim_patch.rewrite.scoped import ScopedTransform, method_call

RECEIVER = "self.executor"


def _unique_reply(call: cst.Call) -> bool:
    return any(a.keyword is not None and a.keyword.value == "unique_reply_rank"
               and not (isinstance(a.value, cst.Name) and a.value.value == "None") for a in call.args)


def _is_zero_index(node: cst.Subscript) -> bool:
    if len(node.slice) != 1 or not isinstance(node.slice[0].slice, cst.Index):
        return False
    value = node.slice[0].slice.value
    return isinstance(value, cst.Integer) and value.value == "0"


class _Uses(cst.CSTVisitor):
    """Every load of `var` in a function: as `var[0]`, or anything else."""

    def __init__(self, var: str):
        self.var = var
        self.zero: list[cst.Subscript] = []
        self.other = 0
        self.stores = 0
        self._seen: set[int] = set()

    def visit_Subscript(self, node: cst.Subscript) -> None:
        if isinstance(node.value, cst.Name) and node.value.value == self.var and _is_zero_index(node):
            self.zero.append(node)
            self._seen.add(id(node.value))

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        if isinstance(node.target, cst.Name) and node.target.value == self.var:
            self.stores += 1
            self._seen.add(id(node.target))

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self._seen.add(id(node.attr))

    def visit_Arg(self, node: cst.Arg) -> None:
        if node.keyword is not None:
            self._seen.add(id(node.keyword))

    def visit_Name(self, node: cst.Name) -> None:
        if node.value == self.var and id(node) not in self._seen:
            self.other += 1


class Codemod(ScopedTransform):
    region_only = True

    def __init__(self, *args: object, **kwargs: object):
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.replace: set[int] = set()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        if not (self.at_scope or not self.scope.inner):
            return
        for stmt in node.body.body if isinstance(node.body, cst.IndentedBlock) else ():
            small = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 else None
            if not (isinstance(small, cst.Assign) and len(small.targets) == 1
                    and isinstance(small.targets[0].target, cst.Name)):
                continue
            call = method_call(small.value, RECEIVER, "collective_rpc")
            if call is None or not _unique_reply(call):
                continue
            var = small.targets[0].target.value
            uses = _Uses(var)
            node.visit(uses)
            if not uses.zero:
                continue  # already used as the reply itself (speculators 0.4.0)
            if uses.stores != 1 or uses.other:
                self.needs_human(stmt, f"{var} holds a single collective_rpc reply now, and is used other "
                                       f"than as {var}[0]: change it by hand")
                continue
            self.replace |= {id(z) for z in uses.zero}
            for z in uses.zero:
                self.edited(z, f"{var}[0] -> {var}: collective_rpc returns the reply itself")

    def leave_Subscript(self, original_node: cst.Subscript, updated_node: cst.Subscript) -> cst.BaseExpression:
        if id(original_node) in self.replace:
            return updated_node.value.with_changes(lpar=updated_node.lpar, rpar=updated_node.rpar)
        return updated_node

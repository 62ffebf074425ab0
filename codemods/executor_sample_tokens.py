"""Pair speculators' `self.executor.execute_model(...)` with `sample_tokens`, as vLLM's engine does.

From vLLM 0.11.1 the model runner keeps state between the two calls: `execute_model` returns
None and the next `execute_model` without `sample_tokens` in between raises "State error:
sample_tokens() must be called after execute_model() returns None". vLLM's EngineCore.step does
`model_output = execute_model(...)` then `if model_output is None: model_output =
sample_tokens(grammar_output)`; speculators never submits structured-output requests, so the
grammar output is None. A statement already followed by `sample_tokens` is left alone.
"""

from __future__ import annotations

import libcst as cst

from vllm_shim_patch.rewrite.positions import positions
from vllm_shim_patch.rewrite.scoped import ScopedTransform, method_call

RECEIVER = "self.executor"  # the executor speculators' generator holds


def _calls_sample_tokens(stmt: cst.CSTNode) -> bool:
    found = False

    class Find(cst.CSTVisitor):
        def visit_Call(self, node: cst.Call) -> None:
            nonlocal found
            found = found or method_call(node, RECEIVER, "sample_tokens") is not None

    stmt.visit(Find())
    return found


def _names(module: cst.Module) -> set[str]:
    found: set[str] = set()

    class Names(cst.CSTVisitor):
        def visit_Name(self, node: cst.Name) -> None:
            found.add(node.value)

    module.visit(Names())
    return found


def _unused_name(module: cst.Module) -> str:
    """`model_output`, else the first `model_output_N` that no name in the module is."""
    candidates = ("model_output", *(f"model_output_{k}" for k in range(1, 100)))
    # The module's positions, not just its code: the edit that names it asks for them next.
    if candidates[0] not in positions(module).code:
        return candidates[0]  # no name can be any of them: no visit of every node needed
    used = _names(module)
    return next(n for n in candidates if n not in used)


class Codemod(ScopedTransform):
    region_only = True  # reads the rest of the module through self.module only
    _unused: str | None = None  # _unused_name(self.module), once: every node of it visited

    def leave_IndentedBlock(self, original_node: cst.IndentedBlock, updated_node: cst.IndentedBlock
                            ) -> cst.IndentedBlock:
        if not self.in_scope:
            return updated_node
        body = list(updated_node.body)
        out: list[cst.BaseStatement] = []
        for i, (orig, stmt) in enumerate(zip(original_node.body, body)):
            out.append(stmt)
            if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
                continue
            small = stmt.body[0]
            target: str | None = None
            if isinstance(small, cst.Expr) and method_call(small.value, RECEIVER, "execute_model"):
                pass
            elif (isinstance(small, cst.Assign) and len(small.targets) == 1
                  and isinstance(small.targets[0].target, cst.Name)
                  and method_call(small.value, RECEIVER, "execute_model")):
                target = small.targets[0].target.value
            else:
                continue
            following = body[i + 1] if i + 1 < len(body) else None
            if following is not None and _calls_sample_tokens(following):
                continue
            if target is None:
                if self._unused is None:
                    self._unused = _unused_name(self.module)
                target = self._unused
                assign = cst.Assign(targets=[cst.AssignTarget(target=cst.Name(target))], value=small.value)
                out[-1] = stmt.with_changes(body=[assign])
            indent = self.module.default_indent
            out.append(cst.parse_statement(
                f"if {target} is None:\n{indent}{target} = {RECEIVER}.sample_tokens(None)\n",
                config=self.module.config_for_parsing,
            ))
            self.edited(orig, f"call {RECEIVER}.sample_tokens after execute_model")
        return updated_node.with_changes(body=out)

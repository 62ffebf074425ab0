"""Return each prompt's rows by its request id, in input order (speculators 0.3.0).

speculators 0.3.0 slices the concatenated rows of every step by prompt offsets, as if the model
runner took the prompts in input order, whole. It does not: the scheduler chunks prompts across
steps and the GPU model runner orders tokens by its persistent batch (upstream issue 279, fixed
in 0.4.0 by pull request 283). With `worker-request-tracking` the worker returns rows by request
id; this sends it each step's tokens per request id before the step (`_set_request_metadata`,
as 0.4.0 does) and takes prompt i's rows by prompt i's own request id. speculators 0.4.0
already does both and is left alone.
"""

from __future__ import annotations

import libcst as cst

from vllm_shim_patch.rewrite.scoped import ScopedTransform, load_beside, method_call, statements


S = load_beside(__file__, "_speculators")  # the generator shapes the data codemods share

def _runs_step(stmt: cst.BaseStatement, so: str) -> bool:
    """`[x = ]self.executor.execute_model(SO)`."""
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
        return False
    small = stmt.body[0]
    value = small.value if isinstance(small, (cst.Expr, cst.Assign)) else None
    return method_call(value, S.EXECUTOR, "execute_model") is not None


class _Slices(cst.CSTTransformer):
    """`[h[offset : offset + n].clone().cpu() for h in STATES]` -> `[h.clone().cpu() for h in
    STATES[request_ids[I]]]` inside `for I, n in enumerate(...)`."""

    def __init__(self) -> None:
        super().__init__()
        self.index: list[str] = []
        self.originals: list[cst.ListComp] = []

    def visit_For(self, node: cst.For) -> None:
        target = node.target
        first = target.elements[0].value if isinstance(target, cst.Tuple) and target.elements else None
        self.index.append(first.value if isinstance(first, cst.Name) else "")

    def leave_For(self, original_node: cst.For, updated_node: cst.For) -> cst.For:
        self.index.pop()
        return updated_node

    def leave_ListComp(self, original_node: cst.ListComp, updated_node: cst.ListComp) -> cst.BaseExpression:
        comp = updated_node.for_in
        if (not self.index or not self.index[-1] or comp.inner_for_in is not None or comp.ifs
                or not isinstance(comp.target, cst.Name) or not isinstance(comp.iter, cst.Name)):
            return updated_node
        var = comp.target.value
        found = []

        class Strip(cst.CSTTransformer):
            def leave_Subscript(self, o: cst.Subscript, u: cst.Subscript) -> cst.BaseExpression:
                if (isinstance(u.value, cst.Name) and u.value.value == var and len(u.slice) == 1
                        and isinstance(u.slice[0].slice, cst.Slice)):
                    found.append(o)
                    return u.value
                return u

        elt = updated_node.elt.visit(Strip())
        if len(found) != 1:
            return updated_node
        self.originals.append(original_node)
        lookup = cst.parse_expression(f"{comp.iter.value}[request_ids[{self.index[-1]}]]")
        return updated_node.with_changes(elt=elt, for_in=comp.with_changes(iter=lookup))


class Codemod(ScopedTransform):
    region_only = True  # acts on its region's own node; the rest through self.module

    def leave_FunctionDef(self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef) -> cst.FunctionDef:
        if not self.at_scope or not isinstance(updated_node.body, cst.IndentedBlock):
            return updated_node
        if S.rpc_named(updated_node, "_set_request_metadata"):
            return updated_node  # already sends each step's tokens by request (speculators 0.4.0)
        body = list(updated_node.body.body)
        requests, step = S.request_loop(body), S.step_loop(body)
        inner = list(step[1].body.body) if step is not None and isinstance(step[1].body, cst.IndentedBlock) else []
        at = next((j for j, s in enumerate(inner) if step is not None and _runs_step(s, step[2])), None)
        slices = _Slices()
        # The original statements, so the slicing found is the node the diff's lines come from.
        rest = [s.visit(slices) for s in original_node.body.body[step[0] + 1:]] if step is not None else []
        if requests is None or at is None or len(slices.originals) != 1:
            what = ("no loop making Request(request_id=...)" if requests is None
                    else "no step loop running execute_model" if at is None
                    else "no slicing of the captured states by offset")
            self.needs_human(original_node, f"{what} found: take each prompt's rows by its request id by hand")
            return updated_node
        index, loop, so = step
        rpc = statements(f'''
# The worker attributes this step's rows to request ids in the model runner's batch order.
self.executor.collective_rpc("_set_request_metadata", args=(dict({so}.num_scheduled_tokens),))
''', self.module)
        # The new statement takes the place (and the blank line) of the step it precedes.
        rpc[0] = rpc[0].with_changes(leading_lines=[*inner[at].leading_lines, *rpc[0].leading_lines])
        inner[at:at + 1] = [*rpc, inner[at].with_changes(leading_lines=[])]
        body[index + 1:] = rest
        body[index] = loop.with_changes(body=loop.body.with_changes(body=inner))
        body[requests.index + 1:requests.index + 1] = statements(f'''
request_ids = [{requests.request_id} for {requests.target} in {requests.iter}]
''', self.module)
        self.edited(original_node.body.body[index].body.body[at],  # type: ignore[attr-defined]
                    "send the step's tokens per request id to the worker")
        self.edited(original_node.body.body[requests.index], "name each prompt's request id")
        for node in slices.originals:
            self.edited(node, "take each prompt's rows by its own request id")
        return updated_node.with_changes(body=updated_node.body.with_changes(body=body))

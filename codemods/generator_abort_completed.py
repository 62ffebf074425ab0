"""Abort a request only once its whole prompt is computed (speculators 0.3.0).

speculators 0.3.0 aborts every request the scheduler served in a step. When a call holds more
tokens than one step's budget (0.3.0 sets max(8192, max_model_len)), vLLM's scheduler chunks a
prompt across steps, and the abort throws away the rest of it: that prompt comes back short, and
the rows after it shift (upstream issue 279, fixed in 0.4.0 by pull request 283). This counts
each request's scheduled tokens against its prompt length and aborts it only when its prefill is
complete, and fails loudly when vLLM preempts a request (its prompt would be computed again, its
rows counted twice). A request of an earlier call that failed is aborted at once. speculators
0.4.0 aborts after its loop instead and is left alone.
"""

from __future__ import annotations

import json

import libcst as cst

from vllm_shim_patch.rewrite.scoped import ScopedTransform, load_beside, dotted, method_call, statements


S = load_beside(__file__, "_speculators")
NEW_NAMES = ("prompt_lens", "prefilled", "num_tokens")
# A preempted request is computed again from its first token: counted as prefill twice, its rows
# would come back doubled and cut, with no error. Too little KV cache causes it; say so.
PREEMPTED = ("vLLM preempted requests (too little KV cache): their prompts would be computed twice and "
             "their hidden states misattributed; raise gpu_memory_utilization or pass fewer prompts per call")


def _abort_loop(stmt: cst.BaseStatement, so: str) -> str | None:
    """`for r in SO.num_scheduled_tokens: self.scheduler.finish_requests([r], ...)`: r, else None."""
    if not (isinstance(stmt, cst.For) and isinstance(stmt.target, cst.Name)
            and dotted(stmt.iter) == f"{so}.num_scheduled_tokens" and isinstance(stmt.body, cst.IndentedBlock)
            and len(stmt.body.body) == 1 and isinstance(stmt.body.body[0], cst.SimpleStatementLine)):
        return None
    line = stmt.body.body[0]
    call = line.body[0].value if len(line.body) == 1 and isinstance(line.body[0], cst.Expr) else None
    if method_call(call, S.SCHEDULER, "finish_requests") is None:
        return None
    return stmt.target.value


class Codemod(ScopedTransform):
    region_only = True  # acts on its region's own node; the rest through self.module

    def leave_FunctionDef(self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef) -> cst.FunctionDef:
        body = S.function_body(self, updated_node)
        if body is None:
            return updated_node
        step = S.step_loop(body)
        if step is None:
            if not S.calls(updated_node, S.SCHEDULER, "finish_requests"):
                self.needs_human(original_node, "no step loop and no abort of the requests found: check by hand "
                                                "that a chunked prompt is not aborted before its prefill completes")
            return updated_node  # speculators 0.4.0: aborts once every prefill is complete
        index, loop, so = step
        inner = list(loop.body.body) if isinstance(loop.body, cst.IndentedBlock) else []
        at = next((j for j, s in enumerate(inner) if _abort_loop(s, so)), None)
        if at is None:
            return updated_node  # no per-step abort of everything scheduled: nothing to fix
        requests = S.request_loop(body)
        names = set()

        class Names(cst.CSTVisitor):
            def visit_Name(self, node: cst.Name) -> None:
                names.add(node.value)

        updated_node.visit(Names())
        clash = sorted(names & set(NEW_NAMES))
        if requests is None or clash:
            why = (f"the names {clash} are taken" if clash else "no loop making Request(request_id=...) found")
            self.needs_human(original_node, f"{why}: abort a request only once its prefill is complete, by hand")
            return updated_node
        rid = _abort_loop(inner[at], so)
        abort = inner[at].body.body[0]  # type: ignore[attr-defined]
        new_for = statements(f'''
for {rid}, num_tokens in {so}.num_scheduled_tokens.items():
    if getattr({so}, "preempted_req_ids", None):
        raise RuntimeError(PREEMPTED)
    prefilled[{rid}] = prefilled.get({rid}, 0) + num_tokens
    if prefilled[{rid}] >= prompt_lens.get({rid}, 0):
        pass
''', self.module)[0]
        assert isinstance(new_for, cst.For)
        first, count, guard = new_for.body.body  # type: ignore[attr-defined]
        # The message as a literal in the generated code (no name of ours in speculators).
        first = first.with_changes(body=first.body.with_changes(body=[cst.parse_statement(
            f"raise RuntimeError({json.dumps(PREEMPTED)})", config=self.module.config_for_parsing)]))
        guard = guard.with_changes(body=guard.body.with_changes(body=[abort]))
        inner[at] = inner[at].with_changes(
            target=new_for.target, iter=new_for.iter,
            body=new_for.body.with_changes(body=[first, count, guard]))  # type: ignore[attr-defined]
        body[index] = loop.with_changes(body=loop.body.with_changes(body=inner))
        body[requests.index + 1:requests.index + 1] = statements(f'''

# A chunked prompt goes on in the next step: abort a request only once its prefill is complete.
prompt_lens = {{{requests.request_id}: len({requests.prompt}) for {requests.target} in {requests.iter}}}
prefilled = dict.fromkeys(prompt_lens, 0)
''', self.module)
        self.edited(original_node.body.body[requests.index], "count each request's prompt length")
        self.edited(original_node.body.body[index].body.body[at],  # type: ignore[attr-defined]
                    "abort a request only once its whole prompt is computed")
        return updated_node.with_changes(body=updated_node.body.with_changes(body=body))

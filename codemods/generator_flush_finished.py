"""Let the last step's aborted requests reach the model runner (speculators 0.3.0).

The scheduler reports finished request ids once, in the next step's output; speculators 0.3.0
stops at the first empty step, so the ids aborted in its last step never reach the runner, whose
request table then grows with every generate() call. This runs that empty step (the runner
removes the finished requests and computes nothing). speculators 0.4.0 aborts after its loop, and
the next call's first step carries the ids; it is left alone.
"""

from __future__ import annotations

import libcst as cst

from vllm_shim_patch.rewrite.scoped import ScopedTransform, load_beside, statements


S = load_beside(__file__, "_speculators")  # the generator shapes the data codemods share

FLUSH = '''if {so}.finished_req_ids:
    self.executor.execute_model({so})
'''


class Codemod(ScopedTransform):
    region_only = True  # acts on its region's own node; the rest through self.module

    def leave_FunctionDef(self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef) -> cst.FunctionDef:
        body = S.function_body(self, updated_node)
        if body is None:
            return updated_node
        step = S.step_loop(body)
        if step is None:
            return updated_node  # no loop that stops at the first empty step (speculators 0.4.0)
        index, _loop, so = step
        following = body[index + 1] if index + 1 < len(body) else None
        if isinstance(following, cst.If) and S.calls(following, S.EXECUTOR, "execute_model"):
            return updated_node  # already flushed
        body[index + 1:index + 1] = statements('''

# The requests aborted in the last step reach the model runner only with a step: run the empty one.
''' + FLUSH.format(so=so), self.module)
        self.edited(original_node.body.body[index], "send the last step's finished request ids to the model runner")
        return updated_node.with_changes(body=updated_node.body.with_changes(body=body))

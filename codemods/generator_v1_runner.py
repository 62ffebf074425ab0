"""Keep speculators' generator on vLLM's V1 model runner where vLLM may pick Model Runner V2.

From vLLM 0.25.1 `VllmConfig.use_v2_model_runner` picks Model Runner V2 by default when
`VLLM_USE_V2_MODEL_RUNNER` is unset (vllm/config/vllm.py, 0.33.0 lines 731-767), and the GPU
Worker builds `vllm.v1.worker.gpu.model_runner.GPUModelRunner` instead of the V1 runner.
speculators' worker extension drives the V1 runner (0.4.0 reads
`self.model_runner.input_batch.req_id_to_index`, which V2 has not). The V1 runner is still
selectable with `VLLM_USE_V2_MODEL_RUNNER=0`: the generator sets it before it builds its
VllmConfig (which reads it lazily, on every access) and the executor (whose worker processes
inherit it). It is set, not defaulted: with V2, speculators' capture cannot work at all.

Acts on the first `self.vllm_config = ...` assignment in the region; a function that already
mentions VLLM_USE_V2_MODEL_RUNNER is left alone.
"""

from __future__ import annotations

import libcst as cst

from vllm_shim_patch.rewrite.scoped import ScopedTransform, statements

VARIABLE = "VLLM_USE_V2_MODEL_RUNNER"
TARGET = "self.vllm_config"


def _assigns_config(stmt: cst.BaseStatement) -> bool:
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
        return False
    small = stmt.body[0]
    return (isinstance(small, cst.Assign) and len(small.targets) == 1
            and cst.Module([]).code_for_node(small.targets[0].target) == TARGET)


class Codemod(ScopedTransform):
    region_only = True  # acts on its region's own block

    def leave_IndentedBlock(self, original_node: cst.IndentedBlock, updated_node: cst.IndentedBlock
                            ) -> cst.IndentedBlock:
        if not self.in_scope:
            return updated_node
        body = list(updated_node.body)
        at = next((i for i, stmt in enumerate(body) if _assigns_config(stmt)), None)
        if at is None or VARIABLE in cst.Module([]).code_for_node(updated_node):
            return updated_node
        inserted = statements(f"""
            # speculators' worker drives vLLM's V1 model runner (its input_batch); vLLM 0.25.1+
            # may pick Model Runner V2, which has none. Set before the config and the workers.
            import os
            os.environ["{VARIABLE}"] = "0"
            """, self.module)
        self.edited(original_node.body[at], "keep vLLM's V1 model runner (VLLM_USE_V2_MODEL_RUNNER=0)")
        stmt = body[at]
        first = inserted[0]
        assert isinstance(first, cst.SimpleStatementLine)
        # The blank lines and comments above the assignment stay above what now comes first.
        inserted[0] = first.with_changes(leading_lines=[*stmt.leading_lines, *first.leading_lines])
        return updated_node.with_changes(body=[*body[:at], *inserted, stmt.with_changes(leading_lines=[]),
                                               *body[at + 1:]])

"""Let the workers' attention backends decide the KV cache block size where they reject speculators'.

speculators builds its CacheConfig with its own `VLLM_BLOCK_SIZE` (16), a block size vLLM takes as
the user's. Each attention backend names the kernel block sizes it takes
(`AttentionBackend.get_supported_kernel_block_sizes`, read through `supports_block_size`); vLLM
0.32's CPU attention takes multiples of 32 only, and the workers' KV cache set-up then fails with
"No common block size for 16 (CPU_ATTN: [MultipleOf(32)])". Which backend a layer runs is known in
the worker only, once the model is built (vLLM's own worker process asks the layers then,
`update_block_size_for_backend`, but leaves a user's block size alone): so the patched generator
asks its workers, before it asks them for their KV cache specs, and each worker keeps speculators'
size wherever every backend of its layers takes it (a GPU's backends take 16: nothing changes
there), else takes the first of the backends' own preferred sizes (`get_preferred_block_size`)
that all of them take. The driver's CacheConfig gets the workers' answer, and a Scheduler built
with speculators' constant (0.4.0 passes `block_size=VLLM_BLOCK_SIZE`) reads the CacheConfig's,
so the driver's scheduler, block hasher and KV cache plan agree with the workers'.

The function the workers run is nested in `__init__` so the edit stays inside it: vLLM's executor
sends a callable by value (cloudpickle), and its imports are inside it. A function that already
defines it is left alone.
"""

from __future__ import annotations

import libcst as cst

from vllm_shim_patch.rewrite.scoped import ScopedTransform, dotted, method_call, statements

RECEIVER = "self.executor"  # the executor speculators' generator holds
ASK = "_kernel_block_size"  # the function the workers run
CACHE_BLOCK_SIZE = "self.vllm_config.cache_config.block_size"

ASK_WORKERS = f'''
# vLLM 0.18+: each attention backend names the KV cache block sizes its kernels take (vLLM 0.32's
# CPU attention: multiples of 32), known in the workers once the model is built. Keep speculators'
# size where every backend takes it, else the first of their preferred sizes that all take.
def {ASK}(worker):
    from vllm.config import get_layers_from_vllm_config
    from vllm.model_executor.layers.attention_layer_base import AttentionLayerBase

    cache_config = worker.vllm_config.cache_config
    layers = get_layers_from_vllm_config(worker.vllm_config, AttentionLayerBase)
    backends = {{layers[name].get_attn_backend() for name in layers}}
    size = cache_config.block_size
    if not all(backend.supports_block_size(size) for backend in backends):
        preferred = sorted({{backend.get_preferred_block_size(size) for backend in backends}})
        size = next((p for p in preferred if all(b.supports_block_size(p) for b in backends)), size)
    cache_config.block_size = size
    return size

{CACHE_BLOCK_SIZE} = {RECEIVER}.collective_rpc({ASK})[0]
'''


def _asks_for_specs(stmt: cst.BaseStatement) -> bool:
    """`NAME = self.executor.collective_rpc("get_kv_cache_spec")`."""
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
        return False
    small = stmt.body[0]
    if not isinstance(small, cst.Assign):
        return False
    call = method_call(small.value, RECEIVER, "collective_rpc")
    return (call is not None and bool(call.args) and isinstance(call.args[0].value, cst.SimpleString)
            and call.args[0].value.evaluated_value == "get_kv_cache_spec")


def _no_trailing_blanks(stmt: cst.BaseStatement) -> cst.BaseStatement:
    """A blank line above an inserted statement carries no indentation (no trailing whitespace)."""
    lines = [line if line.comment is not None else line.with_changes(indent=False) for line in stmt.leading_lines]
    return stmt.with_changes(leading_lines=lines)


class _SchedulerReadsCacheConfig(cst.CSTTransformer):
    """`Scheduler(..., block_size=EXPR)` with EXPR other than the CacheConfig's: the CacheConfig's."""

    def __init__(self) -> None:
        super().__init__()
        self.changed = False

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.Call:
        if (dotted(updated_node.func) or "").rsplit(".", 1)[-1] != "Scheduler":
            return updated_node
        args = list(updated_node.args)
        for i, arg in enumerate(args):
            if (arg.keyword is not None and arg.keyword.value == "block_size"
                    and dotted(arg.value) != CACHE_BLOCK_SIZE):
                args[i] = arg.with_changes(value=cst.parse_expression(CACHE_BLOCK_SIZE))
                self.changed = True
        return updated_node.with_changes(args=args)


class Codemod(ScopedTransform):
    region_only = True  # acts on its region's own node; the rest through self.module

    def leave_FunctionDef(self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef) -> cst.FunctionDef:
        if not self.at_scope or not isinstance(updated_node.body, cst.IndentedBlock):
            return updated_node
        body = list(updated_node.body.body)
        if any(isinstance(stmt, cst.FunctionDef) and stmt.name.value == ASK for stmt in body):
            return updated_node  # already asks its workers
        at = next((i for i, stmt in enumerate(body) if _asks_for_specs(stmt)), None)
        if at is None:
            self.needs_human(original_node, f'no {RECEIVER}.collective_rpc("get_kv_cache_spec"): cannot tell '
                                            "where the workers' attention backends are known")
            return updated_node
        self.edited(original_node.body.body[at], "the workers' attention backends decide the KV cache block size")
        inserted = [_no_trailing_blanks(stmt) for stmt in statements(ASK_WORKERS, self.module)]
        # The blank lines and comments above the specs' line stay above what now comes first.
        spec_line = body[at]
        assert isinstance(spec_line, cst.SimpleStatementLine)
        first = inserted[0]
        inserted[0] = first.with_changes(leading_lines=[*spec_line.leading_lines, *first.leading_lines])
        after = []
        for j, stmt in enumerate(body[at + 1:], start=at + 1):
            scheduler = _SchedulerReadsCacheConfig()
            after.append(stmt.visit(scheduler))
            if scheduler.changed:
                self.edited(original_node.body.body[j], "the Scheduler's block size is the CacheConfig's")
        body = [*body[:at], *inserted, spec_line.with_changes(leading_lines=[]), *after]
        return updated_node.with_changes(body=updated_node.body.with_changes(body=body))

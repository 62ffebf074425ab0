"""Resolve the KV cache layout before speculators plans the KV cache, as vLLM's engine core does.

From vLLM 0.33.0 `get_kv_cache_config_from_groups` reads
`vllm_config.cache_config.get_resolved_kv_cache_layout()`, which raises "KV cache layout has not
been resolved yet" until someone resolves it. vLLM's EngineCore._initialize_kv_caches does so
(vllm/v1/engine/core.py, 0.33.0 lines 283-295): `layout = resolve_kv_cache_layout(vllm_config,
self.model_executor.get_supported_kv_cache_layouts(), [s for specs in kv_cache_specs for s in
specs.values()])`, which records it on the engine's cache config, then
`self.model_executor.set_kv_cache_layout(layout.name,
vllm_config.parallel_config.cp_kv_cache_interleave_size)` for the workers. speculators builds
no engine core, so the same three steps go before its `get_kv_cache_config_from_groups` call,
over the specs it asked the workers for. (Between the two steps the engine core also runs
`adjust_dcp_kv_cache_interleave_size`, which changes nothing without a KV transfer config and
decode context parallelism, neither of which speculators sets up.) The import is local to the
function so the module still imports where vLLM has no `resolve_kv_cache_layout`. A function
that already calls `resolve_kv_cache_layout` is left alone.

vLLM 0.29 to 0.32 resolve the layout the same way but publish it with
`set_kv_cache_layout(layout.name)` alone (the interleave size came with 0.33): the installed
`MultiprocExecutor.set_kv_cache_layout` (the rule's `guard: accepts` has the engine read it)
decides which call is written; where it is unknown (no vLLM to read), the version the plan is for
does (0.29 to 0.32: the name alone), and 0.33's where that is unknown too.
"""

from __future__ import annotations

import libcst as cst

from vllm_shim_patch.rewrite.scoped import ScopedTransform, dotted, method_call, statements

RECEIVER = "self.executor"  # the executor speculators' generator holds
SET_LAYOUT = "vllm.v1.executor.multiproc_executor.MultiprocExecutor.set_kv_cache_layout"
INTERLEAVE = "cp_kv_cache_interleave_size"
PLAN = "get_kv_cache_config_from_groups"
RESOLVE = "resolve_kv_cache_layout"
LAYOUT = "kv_cache_layout"
INTERLEAVE_SINCE = (0, 33)  # set_kv_cache_layout(name, interleave_size); 0.29-0.32: the name alone


def _calls(node: cst.CSTNode, name: str) -> bool:
    """Whether `node` calls `name` (by its bare name or as an attribute)."""
    found = False

    class Find(cst.CSTVisitor):
        def visit_Call(self, call: cst.Call) -> None:
            nonlocal found
            callee = dotted(call.func)
            found = found or (callee is not None and callee.rsplit(".", 1)[-1] == name)

    node.visit(Find())
    return found


def _spec_list(body: list[cst.BaseStatement]) -> str | None:
    """The name bound to `self.executor.collective_rpc("get_kv_cache_spec")` in the block."""
    for stmt in body:
        if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
            continue
        small = stmt.body[0]
        if (isinstance(small, cst.Assign) and len(small.targets) == 1
                and isinstance(small.targets[0].target, cst.Name)):
            call = method_call(small.value, RECEIVER, "collective_rpc")
            if call is not None and call.args and isinstance(call.args[0].value, cst.SimpleString) \
                    and call.args[0].value.evaluated_value == "get_kv_cache_spec":
                return small.targets[0].target.value
    return None


class Codemod(ScopedTransform):
    region_only = True  # reads the rest of the module through self.module only

    def leave_IndentedBlock(self, original_node: cst.IndentedBlock, updated_node: cst.IndentedBlock
                            ) -> cst.IndentedBlock:
        if not self.in_scope:
            return updated_node
        body = list(updated_node.body)
        at = next((i for i, stmt in enumerate(body)
                   if isinstance(stmt, cst.SimpleStatementLine) and _calls(stmt, PLAN)), None)
        if at is None or any(_calls(stmt, RESOLVE) for stmt in body[:at]):
            return updated_node
        specs = _spec_list(body[:at])
        if specs is None:
            self.needs_human(original_node.body[at], f"no {RECEIVER}.collective_rpc(\"get_kv_cache_spec\") "
                                                     "result before the call: cannot tell which specs to resolve for")
            return updated_node
        if LAYOUT in self.module.code:
            self.needs_human(original_node.body[at], f"the name {LAYOUT!r} is already used in the module")
            return updated_node
        installed = self.signatures.get(SET_LAYOUT)
        if installed is not None:
            interleave = installed.takes(INTERLEAVE)
        else:
            interleave = self.version is None or tuple(self.version.release) >= INTERLEAVE_SINCE
        if interleave:
            publish = f"""
            {RECEIVER}.set_kv_cache_layout(
                {LAYOUT}.name, self.vllm_config.parallel_config.{INTERLEAVE}
            )"""
            since = "0.33+"
        else:
            publish = f"""
            {RECEIVER}.set_kv_cache_layout({LAYOUT}.name)"""
            since = "0.29+"
        inserted = statements(f"""
            # vLLM {since}: the engine core resolves the KV cache layout before the KV cache is planned.
            from vllm.v1.attention.backends.utils import {RESOLVE}
            {LAYOUT} = {RESOLVE}(
                self.vllm_config,
                {RECEIVER}.get_supported_kv_cache_layouts(),
                [spec for specs in {specs} for spec in specs.values()],
            ){publish}
            """, self.module)
        self.edited(original_node.body[at], f"resolve the KV cache layout before {PLAN}")
        # The blank lines and comments above the call stay above the statements it now needs.
        call = body[at]
        assert isinstance(call, cst.SimpleStatementLine)
        first = inserted[0]
        assert isinstance(first, cst.SimpleStatementLine)
        inserted[0] = first.with_changes(leading_lines=[*call.leading_lines, *first.leading_lines])
        return updated_node.with_changes(body=[*body[:at], *inserted, call.with_changes(leading_lines=[]),
                                               *body[at + 1:]])

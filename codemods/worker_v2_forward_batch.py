"""Attribute captured rows to requests through Model Runner V2's own batch for the forward.

vLLM 0.34 removed Model Runner V1: the GPU Worker always builds
`vllm.v1.worker.gpu.model_runner.GPUModelRunner` (V2), which has no `input_batch`. speculators
0.4.0 and 0.4.0.1 order each forward's rows by `self.model_runner.input_batch.req_id_to_index`,
and speculators 0.3.0 as `worker-request-tracking` leaves it by
`self.model_runner.input_batch.req_ids`: AttributeError at the first captured forward.

What V2 offers instead, read in vLLM 0.34.0's `vllm/v1/worker/gpu/model_runner.py`:
- `req_states.req_id_to_index` maps a request to its state SLOT (`RequestState`), handed out on
  add and freed on finish, so a new request takes a finished one's slot: it is not a position in
  the forward (sorting by it put the rows in the wrong order in 2 of 3 steps of a probe on the
  real runner).
- `execute_model_state` holds the forward's InputBatch, but is set only after the forward and
  cleared by `sample_tokens`: during the forward (where the capture runs) it is None.
- `execute_model` builds the forward's batch with `self.prepare_inputs(...)` (an InputBatch:
  `req_ids` in the forward's order, from `sort_batch_req_ids` over the scheduler output;
  `query_start_loc_np`, where each request's rows start) right before the forward, and hands it
  to `kv_connector.pre_forward` in the forward context. That object is the forward's own order.
Recomputing `sort_batch_req_ids` in the worker would copy vLLM's sort key (draft tokens,
`decode_query_len`, adaptive verification) and go wrong when it changes; so the extension wraps
the runner's `prepare_inputs` once, at capture setup, keeping the batch it returns, and each
captured forward takes (and clears) it: a forward no prepare_inputs ran for (a dummy run) cannot
be read with another forward's batch. Rows are taken at each request's `query_start_loc`, not by
adding up the scheduled tokens, so padding rows (`num_tokens_after_padding`) or rows of tokens the
generator does not ask for never shift a request's rows; each forward's stored tensor then holds
exactly the requested rows in batch order, which both releases' `_get_captured_states` slice.
Tensor parallel: every rank wraps its runner, only rank 0 captures (speculators' own rule).

Acts only where `_store_captured_states` is exactly speculators 0.4.0's, or 0.3.0's as
`worker-request-tracking` writes it; any other shape that reads `input_batch` is left for a human.
"""

from __future__ import annotations

import textwrap

import libcst as cst

from vllm_shim_patch.rewrite.scoped import ScopedTransform, load_beside, same_code, statements

STORE = "_store_captured_states"
SETUP = "_setup_hidden_states_capture"
KEEP = "_keep_forward_batch"
ROWS = "_forward_rows"

# speculators 0.4.0's and 0.4.0.1's method, as released (compared as code, not text).
STORE_040 = '''
def _store_captured_states(self, aux_hidden_states):
    if self._captured_states is None:
        self._captured_states = [[h] for h in aux_hidden_states]
    else:
        for i, h in enumerate(aux_hidden_states):
            self._captured_states[i].append(h)

    metadata = getattr(self, "_current_request_metadata", None)
    if metadata is not None:
        input_batch = self.model_runner.input_batch
        sorted_metadata = sorted(
            metadata.items(),
            key=lambda item: input_batch.req_id_to_index.get(item[0], float("inf")),
        )
        self._request_metadata.append(sorted_metadata)
'''

# speculators 0.3.0's method as worker-request-tracking writes it (its original with the tail that
# codemod appends: one source for both, so this codemod matches whatever that one writes).
_TRACKING = load_beside(__file__, "worker_request_tracking")
STORE_030 = _TRACKING.ORIGINAL[STORE] + textwrap.indent(_TRACKING.STORE_TAIL, "    ")

V2_040 = '''
def _store_captured_states(self, aux_hidden_states):
    # vLLM's Model Runner V2 has no input_batch: this forward's rows of each request, through the
    # batch prepare_inputs built for it, in that batch's order.
    metadata = getattr(self, "_current_request_metadata", None)
    aux_hidden_states, sorted_metadata = self._forward_rows(aux_hidden_states, metadata)
    if sorted_metadata is not None:
        self._request_metadata.append(sorted_metadata)  # type: ignore[has-type]
    if self._captured_states is None:  # type: ignore[has-type]
        self._captured_states = [[h] for h in aux_hidden_states]
    else:
        for i, h in enumerate(aux_hidden_states):
            self._captured_states[i].append(h)
'''

V2_030 = '''
def _store_captured_states(self, aux_hidden_states):
    requests = getattr(self, "_request_metadata", None)
    if requests is not None:
        # Inside generate(). vLLM's Model Runner V2 has no input_batch: this forward's rows of each
        # request, through the batch prepare_inputs built for it, in that batch's order.
        metadata, self._current_request_metadata = self._current_request_metadata, None
        aux_hidden_states, metadata = self._forward_rows(aux_hidden_states, metadata)
        requests.append(metadata)
    if self._captured_states is None:  # type: ignore[has-type]
        self._captured_states = [[h] for h in aux_hidden_states]
    else:
        for i, h in enumerate(aux_hidden_states):
            self._captured_states[i].append(h)
'''

# The docstrings' second lines are indented for the class body they land in (a string is not re-indented).
METHODS = f'''
def {KEEP}(self):
    """Keep the batch Model Runner V2 builds for each forward (prepare_inputs): the runner holds
        it only after the forward (execute_model_state), and its req_states are slots, not positions."""
    runner = self.model_runner  # type: ignore[attr-defined]
    if getattr(runner.prepare_inputs, "_keeps_forward_batch", False):
        return
    prepare_inputs = runner.prepare_inputs

    def keep_forward_batch(*args, **kwargs):
        self._forward_batch = prepare_inputs(*args, **kwargs)
        return self._forward_batch

    keep_forward_batch._keeps_forward_batch = True
    runner.prepare_inputs = keep_forward_batch

def {ROWS}(self, aux_hidden_states, metadata):
    """This forward's rows of each request of `metadata` (request id -> tokens) in the batch's
        order, and its (request id, tokens) in that order; as they are where `metadata` is None."""
    batch, self._forward_batch = getattr(self, "_forward_batch", None), None
    if metadata is None:
        return aux_hidden_states, None
    if batch is None:
        raise RuntimeError("no batch of the model runner for this forward (prepare_inputs did not run for it)")
    position = {{req_id: i for i, req_id in enumerate(batch.req_ids)}}
    missing = sorted(set(metadata) - set(position))
    if missing:
        raise RuntimeError(f"requests {{missing}} are not in the model runner's batch")
    ordered = sorted(metadata.items(), key=lambda item: position[item[0]])
    starts = batch.query_start_loc_np
    rows = []
    for req_id, num_tokens in ordered:
        start, end = int(starts[position[req_id]]), int(starts[position[req_id] + 1])
        if num_tokens > end - start:
            raise RuntimeError(f"request {{req_id}} has fewer rows in the forward than the tokens scheduled for it")
        rows.extend(range(start, start + num_tokens))
    index = torch.tensor(rows, dtype=torch.long, device=aux_hidden_states[0].device)
    return [h.index_select(0, index) for h in aux_hidden_states], ordered
'''

SETUP_TAIL = f'''
# Model Runner V2: each forward's batch, for the rows' requests.
self.{KEEP}()
'''


class Codemod(ScopedTransform):
    region_only = True  # acts on its region's own node; the rest through self.module

    def leave_ClassDef(self, original_node: cst.ClassDef, updated_node: cst.ClassDef) -> cst.ClassDef:
        if not self.at_scope or not isinstance(updated_node.body, cst.IndentedBlock):
            return updated_node
        body = list(updated_node.body.body)
        methods = {s.name.value: i for i, s in enumerate(body) if isinstance(s, cst.FunctionDef)}
        if KEEP in methods:
            return updated_node  # already keeps the forward's batch
        if STORE not in methods or SETUP not in methods:
            self.needs_human(original_node, f"no {STORE} or {SETUP}: attribute the captured rows to "
                                            "requests through Model Runner V2's batch by hand")
            return updated_node
        store = body[methods[STORE]]
        setup = body[methods[SETUP]]
        assert isinstance(store, cst.FunctionDef) and isinstance(setup, cst.FunctionDef)
        if same_code(store, STORE_040):
            new_store = V2_040
        elif same_code(store, STORE_030):
            new_store = V2_030
        else:
            if "input_batch" in cst.Module([]).code_for_node(store):
                self.needs_human(original_node.body.body[methods[STORE]],
                                 f"{STORE} differs from speculators 0.4.0's and 0.3.0's (worker-request-tracking): "
                                 "order its rows through Model Runner V2's batch by hand")
            return updated_node
        replaced = statements(new_store, self.module)[0]
        assert isinstance(replaced, cst.FunctionDef)
        body[methods[STORE]] = store.with_changes(body=replaced.body)
        block = setup.body
        assert isinstance(block, cst.IndentedBlock)
        body[methods[SETUP]] = setup.with_changes(
            body=block.with_changes(body=[*block.body, *statements(SETUP_TAIL, self.module)]))
        added = statements(METHODS, self.module)
        at = methods[STORE] + 1
        body[at:at] = [m.with_changes(leading_lines=[cst.EmptyLine(indent=False)]) if isinstance(m, cst.FunctionDef) else m
                       for m in added]
        self.edited(original_node.body.body[methods[STORE]],
                    "order each forward's rows through Model Runner V2's batch for it (prepare_inputs)")
        self.edited(original_node.body.body[methods[SETUP]],
                    "keep the batch prepare_inputs builds for each forward")
        return updated_node.with_changes(body=updated_node.body.with_changes(body=body))

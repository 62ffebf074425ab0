"""Attribute captured rows to request ids in the runner's own batch order (speculators 0.3.0).

speculators 0.3.0's worker concatenates every forward's rows and its generator slices them by
prompt offsets, as if tokens came in prompt order, one prompt per step. vLLM's scheduler chunks a
prompt across steps when a call holds more tokens than a step's budget, and the GPU model runner
orders each step's tokens by its persistent batch (`input_batch.req_ids`, after removing,
condensing and an attention backend's reorder), not by the scheduler's order. So 0.3.0 returns
rows of the wrong prompts (upstream issue 279; fixed in 0.4.0 by pull request 283, whose design
this is): the generator sends each step's tokens per request id (`_set_request_metadata`), the
worker records them in the runner's batch order at every forward, and `_get_captured_states`
returns the rows of each request id. Unlike 0.4.0 it slices each forward's own tensor (padding
rows of a step never shift the next) and fails loudly when a request is not in the batch.

Acts only where the methods are exactly speculators 0.3.0's; any other shape is left for a human.
"""

from __future__ import annotations

import libcst as cst

from vllm_shim_patch.rewrite.scoped import ScopedTransform, same_code, statements

# speculators 0.3.0's methods, as released (compared as code, not text).
ORIGINAL = {
    "_store_captured_states": '''
def _store_captured_states(self, aux_hidden_states):
    if self._captured_states is None:
        self._captured_states = [[h] for h in aux_hidden_states]
    else:
        for i, h in enumerate(aux_hidden_states):
            self._captured_states[i].append(h)
''',
    "_reset_capture": '''
def _reset_capture(self):
    """Reset captured states before starting a new batch"""
    if not hasattr(self, "_layer_ids"):
        raise RuntimeError(
            "Must call _setup_hidden_states_capture before capturing states"
        )
    self._captured_states = None
''',
    "_get_captured_states": '''
def _get_captured_states(self):
    """Get the captured hidden states

    Returns:
        List of tensors, one per target layer, or None if no states captured
    """
    if self._captured_states is None:
        return None
    result = [
        torch.cat(layer_tensors, dim=0) for layer_tensors in self._captured_states
    ]
    self._captured_states = None
    return result
''',
}

STORE_TAIL = '''
requests = getattr(self, "_request_metadata", None)
if requests is not None:
    # Inside generate(): this forward's rows follow the runner's persistent batch, not the
    # scheduler's order; record which request each run of rows belongs to.
    metadata, self._current_request_metadata = self._current_request_metadata, None
    if metadata is None:
        requests.append(None)
    else:
        order = {req_id: i for i, req_id in enumerate(self.model_runner.input_batch.req_ids)}
        missing = sorted(set(metadata) - set(order))
        if missing:
            raise RuntimeError(f"requests {missing} are not in the model runner's batch")
        if sum(metadata.values()) > aux_hidden_states[0].shape[0]:
            raise RuntimeError("the forward has fewer rows than the tokens scheduled for it")
        requests.append(sorted(metadata.items(), key=lambda item: order[item[0]]))
'''

RESET_TAIL = '''
self._request_metadata = []
self._current_request_metadata = None
'''

SET_METADATA = '''
def _set_request_metadata(self, request_metadata):
    """The next forward's tokens per request id (sent by the generator before each step)."""
    self._current_request_metadata = request_metadata
'''

GET_BODY = '''
def _get_captured_states(self):
    """The captured hidden states by request id: one tensor per target layer (None: none)."""
    if self._captured_states is None:
        return None
    result = {}
    for step, metadata in enumerate(self._request_metadata):
        offset = 0
        for req_id, num_tokens in metadata or ():
            layers = result.setdefault(req_id, [[] for _ in self._captured_states])
            for chunks, tensors in zip(layers, self._captured_states):
                chunks.append(tensors[step][offset : offset + num_tokens])
            offset += num_tokens
    self._captured_states = None
    self._request_metadata = []
    return {
        req_id: [torch.cat(chunks, dim=0) for chunks in layers]
        for req_id, layers in result.items()
    }
'''


class Codemod(ScopedTransform):
    region_only = True  # acts on its region's own node; the rest through self.module

    def leave_ClassDef(self, original_node: cst.ClassDef, updated_node: cst.ClassDef) -> cst.ClassDef:
        if not self.at_scope or not isinstance(updated_node.body, cst.IndentedBlock):
            return updated_node
        methods = {s.name.value: (i, s) for i, s in enumerate(updated_node.body.body) if isinstance(s, cst.FunctionDef)}
        if "_set_request_metadata" in methods:
            return updated_node  # already request-tracked (speculators 0.4.0)
        originals = {n: methods.get(n) for n in ORIGINAL}
        changed = [n for n, m in originals.items() if m is None or not same_code(m[1], ORIGINAL[n])]
        if changed:
            where = originals[changed[0]][1] if originals[changed[0]] else original_node
            self.needs_human(where, f"{', '.join(changed)} differ from speculators 0.3.0's: attribute the "
                                    f"captured rows to request ids in the runner's batch order by hand")
            return updated_node
        body = list(updated_node.body.body)
        i, store = originals["_store_captured_states"]
        body[i] = _append(store, STORE_TAIL, self.module)
        i, reset = originals["_reset_capture"]
        body[i] = _append(reset, RESET_TAIL, self.module)
        i, get = originals["_get_captured_states"]
        new_get = statements(GET_BODY, self.module)[0]
        body[i] = get.with_changes(body=new_get.body)
        body.insert(i, statements(SET_METADATA, self.module)[0].with_changes(leading_lines=get.leading_lines))
        self.edited(original_node.body.body[originals["_store_captured_states"][0]],
                    "record each forward's rows by request id in the runner's batch order")
        self.edited(original_node.body.body[originals["_get_captured_states"][0]],
                    "return the captured rows by request id")
        return updated_node.with_changes(body=updated_node.body.with_changes(body=body))


def _append(fn: cst.FunctionDef, source: str, module: cst.Module) -> cst.FunctionDef:
    block = fn.body
    assert isinstance(block, cst.IndentedBlock)
    return fn.with_changes(body=block.with_changes(body=[*block.body, *statements(source, module)]))

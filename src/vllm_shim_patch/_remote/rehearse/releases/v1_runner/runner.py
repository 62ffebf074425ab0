"""The stand-in GPU model runner: vLLM's GPUModelRunner without its CUDA parts (imports vLLM:
imported only once the adapter fits).

One runner per worker, wherever the worker runs: it keeps no state outside itself and reports
each forward through the `on_forward` callback it is given.
"""

import inspect

import torch
from vllm.config import set_current_vllm_config
from vllm.forward_context import set_forward_context
from vllm.model_executor.custom_op import CustomOp
from vllm.model_executor.model_loader.utils import get_model_architecture
from vllm.utils.torch_utils import set_default_torch_dtype
from vllm.v1.worker.gpu_model_runner import GPUModelRunner

from ... import attention, device
from ...answer import CannotRehearse
from ...families import common, moe
from . import shims


def _no_report():
    pass


class StandInModelRunner(GPUModelRunner):
    """WHY: GPUModelRunner needs CUDA (pinned buffers, attention backends, CUDA graphs).
    This subclass skips GPUModelRunner.__init__ and keeps the real runner's request
    bookkeeping: vLLM's InputBatch and the inherited GPUModelRunner._update_states (add,
    remove, condense, the attention backend's reorder) decide the order of the tokens, as
    on the GPU. It runs the model over them on CPU and keeps the installed runner's
    execute_model/sample_tokens state protocol: on a protocol violation it calls the REAL
    GPUModelRunner method, which raises its own error."""

    PROVIDES = {  # attributes Worker code may touch on the runner (drift check)
        "load_model", "get_kv_cache_spec", "initialize_kv_cache", "execute_model",
        "sample_tokens", "_dummy_run", "_dummy_sampler_run", "maybe_remove_all_loras",
        "lora_config", "is_pooling_model", "attn_groups", "model", "model_memory_usage",
        "get_model", "get_supported_tasks", "take_draft_token_ids", "reset_mm_cache",
        "input_batch", "shutdown",
    }
    # Set by __init__ (the self-check compares them with what _update_states reads).
    INSTANCE_ATTRS = {
        "vllm_config", "model_config", "cache_config", "compilation_config", "lora_config",
        "load_config", "parallel_config", "scheduler_config", "speculative_config", "device",
        "model", "model_memory_usage", "is_pooling_model", "attn_groups", "shared_kv_cache_layers",
        "execute_model_state", "kv_connector_output", "use_async_scheduling", "input_batch",
        "kv_cache_config", "requests", "num_prompt_logprobs", "encoder_cache", "uses_mrope",
        "uses_xdrope_dim", "valid_sampled_token_count_event", "reorder_batch_threshold",
        "forward_passes", "steps", "kv_history", "_draft_token_ids", "late_interaction_runner",
        "kv_caches", "use_async_spec_decode", "routed_experts_initialized", "on_forward",
    }
    # What _update_states touches only with speculative decoding (speculators sets none).
    SPEC_DECODE_ONLY = {
        "_ngram_pinned_idx_buf", "_ngram_pinned_val_buf", "_num_valid_draft_tokens_cpu",
        "_num_valid_draft_tokens_event", "num_tokens_no_spec_gpu", "token_ids_gpu_tensor",
        "prev_num_draft_tokens",
    }
    # Runner attributes the installed Worker reaches only on paths this rehearsal cannot take.
    NOT_REACHED = {
        "capture_model": "enforce_eager=True (speculators sets it)",
        "_determine_batch_execution_and_padding": "pipeline parallel only",
        "_dummy_pooler_run": "pooling models only",
        "peak_activation_memory": "set by determine_available_memory, not called",
        "init_fp8_kv_scales": "sleep mode only",
        "_init_kv_zero_meta": "KV caches with Mamba layers or mixed precisions only",
        "eplb": "Model Runner V2 only (the stand-in worker refuses V2: see RehearsalWorker.init_device)",
        "pool": "pooling models on Model Runner V2 only",
        # vLLM 0.17-0.23 Worker.load_model: only for an elastic-EP scale-up launch
        # (VLLM_ELASTIC_EP_SCALE_UP_LAUNCH=1, which the adapter's install() takes out of the environment).
        "setup_eplb_from_mapping": "elastic-EP scale-up launches only (VLLM_ELASTIC_EP_SCALE_UP_LAUNCH, unset here)",
        "eep_eplb_suppressed": "elastic-EP scale-up launches only (VLLM_ELASTIC_EP_SCALE_UP_LAUNCH, unset here)",
        "init_routed_experts_capturer": "enable_return_routed_experts only (speculators' ModelConfig leaves it off)",
    }
    # The installed GPUModelRunner.load_model's parameters the stand-in honours, with the
    # values it can take: elastic EP scale-up (0.16) never happens here, dummy weights (0.33)
    # are what the stand-in always loads, a model built by the caller (0.33) never comes.
    LOAD_MODEL_ARGS = {"eep_scale_up": (False,), "load_dummy_weights": (False, True), "model": (None,)}
    # Weights by parameter name, each drawn whole and handed to the parameter's own weight loader
    # (a subclass for a world of many ranks sets it: every rank's shard a slice of one model).
    WEIGHTS_BY_NAME = False

    def __init__(self, vllm_config, device, on_forward=None):  # deliberately not GPUModelRunner.__init__
        self.vllm_config = vllm_config
        self.model_config = vllm_config.model_config
        self.cache_config = vllm_config.cache_config
        self.compilation_config = vllm_config.compilation_config
        self.lora_config = vllm_config.lora_config
        self.load_config = vllm_config.load_config
        self.parallel_config = vllm_config.parallel_config
        self.scheduler_config = vllm_config.scheduler_config
        self.speculative_config = vllm_config.speculative_config
        self.device = device
        self.model = None
        self.model_memory_usage = 0
        self.is_pooling_model = False
        self.attn_groups = []
        self.shared_kv_cache_layers = {}
        self.execute_model_state = None
        self.kv_connector_output = None
        self.use_async_scheduling = bool(getattr(self.scheduler_config, "async_scheduling", False))
        self.input_batch = shims.input_batch(vllm_config, device)
        self.kv_cache_config = None
        self.requests = {}  # req_id -> CachedRequestState, as GPUModelRunner keeps them
        self.num_prompt_logprobs = {}
        self.encoder_cache = {}
        self.uses_mrope = False
        self.uses_xdrope_dim = 0
        self.valid_sampled_token_count_event = None
        # GPUModelRunner.__init__'s value: no draft tokens (vLLM 0.12's _update_states reads it
        # when the scheduler output has speculative tokens; ours never does).
        self._draft_token_ids = None
        # GPUModelRunner.__init__'s values (0.33): the pooling runner's bookkeeping (real,
        # it only tracks requests), no KV tensors, no speculative decoding.
        self.late_interaction_runner = shims.late_interaction_runner()
        self.kv_caches = []
        self.use_async_spec_decode = False
        # GPUModelRunner's value while enable_return_routed_experts is off (vLLM 0.21+'s
        # _update_states reads it): only init_routed_experts_capturer (NOT_REACHED) sets it on.
        self.routed_experts_initialized = False
        # An attention backend's reorder_batch_threshold (FlashInfer 1, FlashMLA 128): the
        # rehearsal sets it per call to reorder the batch as that backend would.
        self.reorder_batch_threshold = None
        self.forward_passes = 0
        self.on_forward = on_forward or _no_report  # called once per forward of execute_model
        self.steps = []  # one record per forward: what the run reports and checks
        self.kv_history = {}  # the stand-in attention backend's KV cache: {layer: {req_id: (k, v)}}

    def load_model(self, *args, **kwargs):
        bound = inspect.signature(GPUModelRunner.load_model).bind(self, *args, **kwargs)
        for name, value in list(bound.arguments.items())[1:]:
            if value not in self.LOAD_MODEL_ARGS.get(name, ()):
                raise CannotRehearse(f"stand-in StandInModelRunner.load_model cannot honour {name}={value!r}")
        # Same steps as vLLM's DummyModelLoader: resolve the architecture through the real
        # registry, build under set_default_torch_dtype + set_current_vllm_config, then
        # vLLM's dummy initializer (drawn wide: see families.common.WIDTH), or weights by name.
        mc = self.model_config
        model_cls, _arch = get_model_architecture(mc)
        with set_default_torch_dtype(mc.dtype), torch.device("cpu"), device.building():
            with set_current_vllm_config(self.vllm_config, check_compile=True, prefix=""):
                model = model_cls(vllm_config=self.vllm_config, prefix="")
        common.init_weights(model, mc, by_name=self.WEIGHTS_BY_NAME)
        # CUDA kernels are chosen at construction; select vLLM's own forward_native instead.
        for m in model.modules():
            if isinstance(m, CustomOp):
                m._forward_method = m.forward_native
        moe.after_weights(model, self.vllm_config)  # after: vLLM 0.12-0.14's path is a dispatch too
        self.model = model.eval()

    def get_model(self):
        return self.model

    def get_supported_tasks(self):
        return ("generate",)

    def take_draft_token_ids(self):
        return None

    def reset_mm_cache(self):
        return None

    def shutdown(self):
        return None

    # get_kv_cache_spec and maybe_remove_all_loras are inherited: the REAL code runs.

    def initialize_kv_cache(self, kv_cache_config, *args, **kwargs):
        # Later parameters (0.33: is_profiling, kv_cache_allocation_context) say how the KV
        # tensors are allocated; the stand-in allocates none (its KV history is per request).
        inspect.signature(GPUModelRunner.initialize_kv_cache).bind(self, kv_cache_config, *args, **kwargs)
        # The real runner allocates one KV tensor per layer; check the config names
        # exactly the attention layers the model registered, allocate nothing.
        names = {n for g in kv_cache_config.kv_cache_groups for n in g.layer_names}
        ours = set(self.get_kv_cache_spec())
        if names != ours:
            raise RuntimeError(f"KV cache config layers {sorted(names)} != model layers {sorted(ours)}")
        self.kv_cache_config = kv_cache_config

    def _forward(self, input_ids, positions, segments=None, history=None):
        """segments: (req_id, first row, first position, rows) per request in token order;
        None on the warm-up run (no attention metadata, as vLLM's _dummy_run)."""
        n = int(input_ids.shape[0])
        meta = None if segments is None else attention.Metadata(
            segments, self.kv_history if history is None else history)
        with set_forward_context(meta, self.vllm_config, num_tokens=n):
            # same keywords as GPUModelRunner._model_forward / _dummy_run
            return self.model(input_ids=input_ids, positions=positions,
                              intermediate_tensors=None, inputs_embeds=None)

    @torch.inference_mode()
    def _dummy_run(self, num_tokens, *args, **kwargs):
        # The real warm-up runs the model (hence speculators' patched forward) over
        # num_tokens dummy tokens; so does this one.
        ids = torch.zeros(num_tokens, dtype=torch.long)
        pos = torch.arange(num_tokens, dtype=torch.long)
        hidden = self._forward(ids, pos)
        if isinstance(hidden, tuple):
            hidden = hidden[0]
        return hidden, hidden

    @torch.inference_mode()
    def _dummy_sampler_run(self, hidden_states):
        logits = self.model.compute_logits(hidden_states)
        return logits.argmax(dim=-1)

    # _update_states is inherited: the REAL code adds, removes, condenses and reorders.

    @torch.inference_mode()
    def execute_model(self, scheduler_output, intermediate_tensors=None):
        if self.execute_model_state is not None:
            # Protocol violation: let the installed GPUModelRunner raise its own error.
            return GPUModelRunner.execute_model(self, scheduler_output, intermediate_tensors)
        so = scheduler_output
        self._update_states(so)
        for held in self.kv_history.values():  # the KV cache frees what the runner dropped
            for rid in [r for r in held if r not in self.requests]:
                del held[rid]
        if not so.total_num_scheduled_tokens:
            # As the real runner: the states are updated, nothing runs, nothing is kept.
            return shims.runner_output(req_ids=[], req_id_to_index={}, sampled_token_ids=[])
        req_ids, ids, pos, last_idx, segments, chunked = self._batch_order(so)
        self.steps.append({"scheduler": list(so.num_scheduled_tokens), "runner": req_ids,
                           "tokens": len(ids), "chunked": chunked, "requests": sorted(self.requests)})
        self.forward_passes += 1
        self.on_forward()
        hidden = self._forward(torch.tensor(ids, dtype=torch.long), torch.tensor(pos, dtype=torch.long),
                               segments)
        if isinstance(hidden, tuple):
            hidden = hidden[0]
        logits = self.model.compute_logits(hidden[torch.tensor(last_idx)])
        return self._finish(so, logits, req_ids, None)

    def _batch_order(self, so):
        """GPUModelRunner.execute_model/_prepare_inputs: tokens in the persistent batch's order,
        positions from its num_computed_tokens_cpu, ids from its token_ids_cpu. (request ids,
        token ids, positions, each request's last row, attention segments, any prompt chunked)"""
        batch = self.input_batch
        req_ids = list(batch.req_ids)
        ids, pos, last_idx, chunked, segments = [], [], [], False, []
        for idx, rid in enumerate(req_ids):
            n = so.num_scheduled_tokens[rid]
            start = int(batch.num_computed_tokens_cpu[idx])
            segments.append((rid, len(ids), start, n))
            ids += batch.token_ids_cpu[idx, start:start + n].tolist()
            pos += range(start, start + n)
            last_idx.append(len(ids) - 1)
            chunked = chunked or start + n < len(self.requests[rid].prompt_token_ids)
        return req_ids, ids, pos, last_idx, segments, chunked

    def _finish(self, so, logits, req_ids, ready):
        if shims.TWO_PHASE:
            # Installed runner: execute_model returns None and keeps state for sample_tokens.
            self.execute_model_state = (so, logits, req_ids)
            return None
        return ready if ready is not None else self._sample(logits, req_ids)

    def _sample(self, logits, req_ids):
        toks = [] if logits is None else logits.argmax(dim=-1).tolist()
        return shims.runner_output(
            req_ids=list(req_ids),
            req_id_to_index={r: i for i, r in enumerate(req_ids)},
            sampled_token_ids=[[t] for t in toks],
        )

    @torch.inference_mode()
    def sample_tokens(self, grammar_output):
        if self.execute_model_state is None:
            # No pending state: the installed GPUModelRunner decides what that means.
            return GPUModelRunner.sample_tokens(self, grammar_output)
        _so, logits, req_ids = self.execute_model_state
        self.execute_model_state = None
        return self._sample(logits, req_ids)

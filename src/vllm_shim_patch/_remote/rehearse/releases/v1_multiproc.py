"""vLLM's V1 engine with MultiprocExecutor, WorkerProc, the GPU Worker and GPUModelRunner.

Only process plumbing, device set-up and the runner's GPU parts are stood in, so conventions
such as collective_rpc's reply shape come from vLLM itself.
"""

import collections
import dataclasses
import importlib
import inspect
import logging
import multiprocessing
import os
import pickle
import sys
import threading
import time
import types
import weakref

from .. import attention
from ..answer import CannotRehearse, Drained
from ..families import common, moe
from ..selfcheck import code_names, runner_attrs_used, self_attrs

NAME = "v1-multiproc"

REAL = [
    "vllm.v1.executor.multiproc_executor.MultiprocExecutor instance: __init__ (Executor.__init__), "
    "collective_rpc, execute_model, sample_tokens, initialize_from_config, _get_output_rank, shutdown",
    "vllm.v1.executor.multiproc_executor.WorkerProc: __init__, worker_busy_loop, handle_output, "
    "enqueue_output, ResponseStatus, shutdown (in this process)",
    "vllm.v1.worker.worker_base.WorkerWrapperBase: init_worker (mixes in worker_extension_cls), "
    "execute_model, initialize_from_config, __getattr__ dispatch",
    "vllm.v1.worker.gpu_worker.Worker methods: __init__, load_model, get_kv_cache_spec, "
    "initialize_from_config, compile_or_warm_up_model, execute_model, sample_tokens, shutdown",
    "vllm.v1.worker.gpu_worker.init_worker_distributed_environment (gloo, world size 1)",
    "vllm.v1.worker.gpu_model_runner.GPUModelRunner: get_kv_cache_spec, maybe_remove_all_loras, "
    "_update_states and _may_reorder_batch (the persistent batch, hence the order of the tokens), "
    "and the execute_model/sample_tokens state guards (called on the stand-in runner)",
    "vllm.v1.worker.gpu_input_batch.InputBatch and CachedRequestState (add, remove, condense, swap; "
    "reorder_batch_to_split_decodes_and_prefills with an attention backend's threshold)",
    "vllm.forward_context.set_forward_context, vllm.distributed parallel state",
]
STOOD_IN = [
    "MultiprocExecutor._init_executor: the only replaced executor method; it spawns worker processes and "
    "creates shared-memory MessageQueues. Ours builds one in-process WorkerProc and the queues below, "
    "then sets the same attributes the real one sets",
    "MessageQueue objects (executor rpc_broadcast_mq, worker rpc_broadcast_mq, worker_response_mq): "
    "in-process queues with enqueue/dequeue; messages are pickled like the real queue does; enqueue on the "
    "broadcast queue runs the real WorkerProc.worker_busy_loop until the queue is drained",
    "worker process handles (WorkerProcHandle.proc): an object that is never alive (no process exists)",
    "WorkerProc._init_message_queues: returns the in-process queues instead of shm/zmq ones",
    "parallel_config.worker_cls: a subclass of vLLM's GPU Worker whose only override is init_device "
    "(the real one asserts CUDA devices, sets the CUDA device, snapshots CUDA memory and builds "
    "GPUModelRunner); ours calls vLLM's init_worker_distributed_environment with gloo and builds the "
    "stand-in runner",
    "GPU model runner: a GPUModelRunner subclass that does not run GPUModelRunner.__init__; it loads the "
    "model and runs it on CPU over the tokens in the persistent batch's order (the ~10 index lines of "
    "_prepare_inputs re-stated), and keeps the installed runner's execute_model/sample_tokens state "
    "protocol (its state errors are raised by the real GPUModelRunner code)",
    "CustomOp kernel dispatch: forward_native is selected (CUDA kernels cannot run on CPU)",
    "model registry inspection subprocess: the family's architectures are registered as already-imported "
    "classes, so vLLM's own _ModelInfo.from_model_cls runs in-process (no subprocess, no cache file)",
]

# Members of vLLM this adapter builds on; the first one missing says it does not fit.
_NEEDS = (
    ("vllm.v1.executor.multiproc_executor", "MultiprocExecutor._init_executor"),
    ("vllm.v1.executor.multiproc_executor", "WorkerProc._init_message_queues"),
    ("vllm.v1.executor.multiproc_executor", "WorkerProc.worker_busy_loop"),
    ("vllm.v1.executor.multiproc_executor", "WorkerProcHandle"),
    ("vllm.v1.worker.gpu_worker", "Worker.init_device"),
    ("vllm.v1.worker.gpu_worker", "init_worker_distributed_environment"),
    ("vllm.v1.worker.gpu_model_runner", "GPUModelRunner.execute_model"),
)


def fits():
    for module, member in _NEEDS:
        try:
            obj = importlib.import_module(module)
        except ImportError as e:
            return f"{module} does not import ({type(e).__name__}: {e})"
        for part in member.split("."):
            obj = getattr(obj, part, None)
            if obj is None:
                return f"{module}.{member} is missing"
    return None


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
    # (VLLM_ELASTIC_EP_SCALE_UP_LAUNCH=1, which build() takes out of the rehearsal's environment).
    "setup_eplb_from_mapping": "elastic-EP scale-up launches only (VLLM_ELASTIC_EP_SCALE_UP_LAUNCH, unset here)",
    "eep_eplb_suppressed": "elastic-EP scale-up launches only (VLLM_ELASTIC_EP_SCALE_UP_LAUNCH, unset here)",
    "init_routed_experts_capturer": "enable_return_routed_experts only (speculators' ModelConfig leaves it off)",
}


def build(run, family):
    import torch

    # speculators launches no elastic-EP scale-up; a user's variable must not send the real
    # Worker.load_model down that path (receive_expert_mapping, NOT_REACHED's eplb members).
    os.environ.pop("VLLM_ELASTIC_EP_SCALE_UP_LAUNCH", None)

    from vllm.config import set_current_vllm_config
    from vllm.forward_context import set_forward_context
    from vllm.model_executor.custom_op import CustomOp
    from vllm.model_executor.model_loader.utils import get_model_architecture
    from vllm.utils.network_utils import get_distributed_init_method, get_loopback_ip, get_open_port
    from vllm.utils.torch_utils import set_default_torch_dtype
    from vllm.v1.executor import multiproc_executor as mpe
    from vllm.v1.outputs import ModelRunnerOutput
    from vllm.v1.sample.logits_processor import build_logitsprocs
    from vllm.v1.worker import gpu_worker
    from vllm.v1.worker.gpu_input_batch import InputBatch
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    try:
        from vllm.utils.torch_utils import set_random_seed
    except ImportError:  # pragma: no cover - older layouts
        set_random_seed = getattr(gpu_worker, "set_random_seed", lambda seed: None)

    two_phase = hasattr(GPUModelRunner, "sample_tokens")

    # What GPUModelRunner passes for a generation run without logprobs, for the fields the
    # installed ModelRunnerOutput requires (vLLM 0.12 has no defaults for them; 0.16 has).
    no_logprobs = {"logprobs": None, "prompt_logprobs_dict": {}, "pooler_output": []}
    required = [f.name for f in dataclasses.fields(ModelRunnerOutput)
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]

    def runner_output(**given):
        return ModelRunnerOutput(**given, **{k: v for k, v in no_logprobs.items()
                                             if k in required and k not in given})

    def input_batch(vllm_config, device):
        """vLLM's own persistent batch, built with the arguments GPUModelRunner.__init__ passes
        (pinned memory off: there is no GPU to copy to)."""
        mc, cc, sc = vllm_config.model_config, vllm_config.cache_config, vllm_config.scheduler_config
        offered = {
            "max_num_reqs": sc.max_num_seqs, "max_model_len": mc.max_model_len,
            "max_num_batched_tokens": sc.max_num_batched_tokens, "device": device, "pin_memory": False,
            "vocab_size": mc.get_vocab_size(), "block_sizes": [cc.block_size],
            "kernel_block_sizes": [cc.block_size], "is_spec_decode": False,
            # 0.33's placeholder batch: the blocks of the longest request, for the one group.
            "max_num_blocks_per_req": [-(-mc.max_model_len // cc.block_size)],
            "logitsprocs": build_logitsprocs(vllm_config, device, False, False, ()),
            "logitsprocs_need_output_token_ids": False, "is_pooling_model": False,
            "cp_kv_cache_interleave_size": getattr(vllm_config.parallel_config, "cp_kv_cache_interleave_size", 1),
        }
        params = inspect.signature(InputBatch.__init__).parameters
        return InputBatch(**{k: v for k, v in offered.items() if k in params})

    def late_interaction_runner():
        # The class GPUModelRunner.__init__ builds, from where the runner's module has it (its
        # home moved between releases); before 0.25 _update_states does not ask for one.
        cls = getattr(sys.modules[GPUModelRunner.__module__], "LateInteractionRunner", None)
        return None if cls is None else cls()

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
            "kv_caches", "use_async_spec_decode", "routed_experts_initialized",
        }
        # What _update_states touches only with speculative decoding (speculators sets none).
        SPEC_DECODE_ONLY = {
            "_ngram_pinned_idx_buf", "_ngram_pinned_val_buf", "_num_valid_draft_tokens_cpu",
            "_num_valid_draft_tokens_event", "num_tokens_no_spec_gpu", "token_ids_gpu_tensor",
            "prev_num_draft_tokens",
        }

        def __init__(self, vllm_config, device):  # deliberately not GPUModelRunner.__init__
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
            self.input_batch = input_batch(vllm_config, device)
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
            self.late_interaction_runner = late_interaction_runner()
            self.kv_caches = []
            self.use_async_spec_decode = False
            # GPUModelRunner's value while enable_return_routed_experts is off (vLLM 0.21+'s
            # _update_states reads it): only init_routed_experts_capturer (NOT_REACHED) sets it on.
            self.routed_experts_initialized = False
            # An attention backend's reorder_batch_threshold (FlashInfer 1, FlashMLA 128): the
            # rehearsal sets it per call to reorder the batch as that backend would.
            self.reorder_batch_threshold = None
            self.forward_passes = 0
            self.steps = []  # one record per forward: what the run reports and checks
            self.kv_history = {}  # the stand-in attention backend's KV cache: {layer: {req_id: (k, v)}}

        # The installed GPUModelRunner.load_model's parameters the stand-in honours, with the
        # values it can take: elastic EP scale-up (0.16) never happens here, dummy weights (0.33)
        # are what the stand-in always loads, a model built by the caller (0.33) never comes.
        LOAD_MODEL_ARGS = {"eep_scale_up": (False,), "load_dummy_weights": (False, True), "model": (None,)}

        def load_model(self, *args, **kwargs):
            bound = inspect.signature(GPUModelRunner.load_model).bind(self, *args, **kwargs)
            for name, value in list(bound.arguments.items())[1:]:
                if value not in self.LOAD_MODEL_ARGS.get(name, ()):
                    raise CannotRehearse(f"stand-in StandInModelRunner.load_model cannot honour {name}={value!r}")
            # Same steps as vLLM's DummyModelLoader: resolve the architecture through the real
            # registry, build under set_default_torch_dtype + set_current_vllm_config, then
            # vLLM's dummy initializer (drawn wide: see families.common.WIDTH).
            mc = self.model_config
            model_cls, _arch = get_model_architecture(mc)
            with set_default_torch_dtype(mc.dtype), torch.device("cpu"):
                with set_current_vllm_config(self.vllm_config, check_compile=True, prefix=""):
                    model = model_cls(vllm_config=self.vllm_config, prefix="")
            common.init_weights(model, mc)
            moe.after_weights(model)
            # CUDA kernels are chosen at construction; select vLLM's own forward_native instead.
            for m in model.modules():
                if isinstance(m, CustomOp):
                    m._forward_method = m.forward_native
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
                return runner_output(req_ids=[], req_id_to_index={}, sampled_token_ids=[])
            # GPUModelRunner.execute_model/_prepare_inputs: tokens in the persistent batch's
            # order, positions from its num_computed_tokens_cpu, ids from its token_ids_cpu.
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
            self.steps.append({"scheduler": list(so.num_scheduled_tokens), "runner": req_ids,
                               "tokens": len(ids), "chunked": chunked, "requests": sorted(self.requests)})
            self.forward_passes += 1
            run.iterations += 1
            hidden = self._forward(torch.tensor(ids, dtype=torch.long), torch.tensor(pos, dtype=torch.long),
                                   segments)
            if isinstance(hidden, tuple):
                hidden = hidden[0]
            logits = self.model.compute_logits(hidden[torch.tensor(last_idx)])
            return self._finish(so, logits, req_ids, None)

        def _finish(self, so, logits, req_ids, ready):
            if two_phase:
                # Installed runner: execute_model returns None and keeps state for sample_tokens.
                self.execute_model_state = (so, logits, req_ids)
                return None
            return ready if ready is not None else self._sample(logits, req_ids)

        def _sample(self, logits, req_ids):
            toks = [] if logits is None else logits.argmax(dim=-1).tolist()
            return runner_output(
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

    class RehearsalWorker(gpu_worker.Worker):
        """vLLM's GPU Worker with ONE override: init_device. WHY: the real one asserts CUDA
        devices, calls torch.cuda.set_device, takes a CUDA memory snapshot and builds
        GPUModelRunner. Everything else (load_model, get_kv_cache_spec, initialize_from_config,
        compile_or_warm_up_model, execute_model, sample_tokens) is the installed Worker code."""

        def init_device(self):
            if getattr(self, "use_v2_model_runner", False):
                refuse_v2()
            self.device = torch.device("cpu")
            gpu_worker.init_worker_distributed_environment(
                self.vllm_config, self.rank, self.distributed_init_method, self.local_rank, "gloo")
            set_random_seed(self.model_config.seed)
            self.model_runner = StandInModelRunner(self.vllm_config, self.device)

    def refuse_v2():
        # The real Worker would build Model Runner V2 (vLLM 0.25.1+ picks it by default): a
        # runner without the V1 runner's input_batch, which speculators' worker reads, and one
        # this rehearsal has no stand-in for.
        raise CannotRehearse(
            "vLLM selected Model Runner V2 for the generator (VLLM_USE_V2_MODEL_RUNNER is "
            f"{os.environ.get('VLLM_USE_V2_MODEL_RUNNER', 'unset')}): speculators' worker drives the V1 "
            "runner, and the rehearsal stands in for the V1 runner only")

    def _copy(obj):
        # The real MessageQueue pickles every message: receivers never share objects
        # with senders, and unpicklable payloads fail. Keep both properties.
        return pickle.loads(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))

    class WorkerInbox:
        """The worker side of rpc_broadcast_mq (WorkerProc.rpc_broadcast_mq)."""

        def __init__(self):
            self.q = collections.deque()

        def dequeue(self, timeout=None, cancel=None, indefinite=False):
            if self.q:
                return self.q.popleft()
            raise Drained()

        def wait_until_ready(self):
            pass

    class BroadcastMQ:
        """The executor side of rpc_broadcast_mq. enqueue delivers a pickled copy to every
        in-process worker and runs the REAL WorkerProc.worker_busy_loop until its inbox is empty."""

        def __init__(self):
            self.procs = []

        def enqueue(self, obj, timeout=None):
            data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
            for proc in self.procs:
                proc.rpc_broadcast_mq.q.append(pickle.loads(data))
            for proc in self.procs:
                try:
                    proc.worker_busy_loop()
                except Drained:
                    pass

        def export_handle(self):
            return None

        def wait_until_ready(self):
            pass

    class ResponseMQ:
        """WorkerProc.worker_response_mq / executor response_mqs[rank]. Replies may arrive from
        the real WorkerProc's async-output thread (async scheduling), so dequeue blocks like the
        real queue, up to its timeout (the rehearsal's own watchdog bounds timeout=None)."""

        def __init__(self):
            self.q = collections.deque()
            self.cv = threading.Condition()

        def enqueue(self, obj, timeout=None):
            item = _copy(obj)
            with self.cv:
                self.q.append(item)
                self.cv.notify_all()

        def dequeue(self, timeout=None, cancel=None, indefinite=False):
            deadline = None if timeout is None else time.monotonic() + timeout
            with self.cv:
                while not self.q:
                    if cancel is not None and cancel.is_set():
                        raise RuntimeError("cancelled")
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        raise TimeoutError("no reply from the in-process worker")
                    self.cv.wait(0.05 if left is None else min(left, 0.05))
                return self.q.popleft()

        def wait_until_ready(self):
            pass

    class InProcWorkerProc(mpe.WorkerProc):
        """The real WorkerProc, constructed in this process. Only _init_message_queues is
        replaced (it attaches to shared memory / zmq sockets)."""

        def _init_message_queues(self, input_shm_handle, vllm_config):
            self.rpc_broadcast_mq = WorkerInbox()
            self.worker_response_mq = ResponseMQ()
            self.peer_response_handles = []

    class _NoProcess:
        """WorkerProcHandle.proc: there is no process; never alive."""

        name = "in-process-worker"
        sentinel = None

        def is_alive(self):
            return False

        def terminate(self):
            pass

        def kill(self):
            pass

        def join(self, timeout=None):
            pass

    created = {"executors": [], "procs": [], "worker_failures": []}

    class _WorkerFailureTap(logging.Handler):
        """WorkerProc.worker_busy_loop logs every worker exception with logger.exception()
        before sending only str(e) back; keep the exception object (with its traceback)
        so the report can name the worker-side frames."""

        def emit(self, record):
            if record.exc_info and record.exc_info[1] is not None:
                created["worker_failures"].append(record.exc_info[1])

    mpe.logger.addHandler(_WorkerFailureTap(level=0))
    worker_mod = types.ModuleType("_rehearse_standins")
    worker_mod.RehearsalWorker = RehearsalWorker
    sys.modules["_rehearse_standins"] = worker_mod

    def _init_executor(self):
        """Replaces MultiprocExecutor._init_executor (only). Sets the attributes the real one
        sets; the worker is the real WorkerProc built in this process; no processes, no shm."""
        self._finalizer = weakref.finalize(self, self.shutdown)
        self.is_failed = False
        self.shutdown_event = threading.Event()
        self.failure_callback = None
        if hasattr(self, "_get_parallel_sizes"):
            self._get_parallel_sizes()  # sets world_size, local_world_size
        else:
            # vLLM 0.12's _init_executor sets them inline, from the same parallel config.
            self.world_size = self.parallel_config.world_size
            self.local_world_size = self.parallel_config.local_world_size
        if getattr(self.vllm_config, "use_v2_model_runner", False):
            refuse_v2()  # before the real Worker.__init__ refuses it for want of Triton on CPU
        if self.world_size != 1 or self.local_world_size != 1:
            raise CannotRehearse(f"rehearsal runs one in-process worker; world_size={self.world_size}")
        # Device/platform stand-in: on a GPU platform check_and_update_config would have set
        # worker_cls to vllm.v1.worker.gpu_worker.Worker; use its CPU-capable subclass.
        self.parallel_config.worker_cls = "_rehearse_standins.RehearsalWorker"
        distributed_init_method = get_distributed_init_method(get_loopback_ip(), get_open_port())
        self.rpc_broadcast_mq = BroadcastMQ()
        # The executor names the driver where WorkerProc takes it (vLLM 0.12's decides itself).
        driver = ({"is_driver_worker": self._is_driver_worker(0)}
                  if "is_driver_worker" in inspect.signature(mpe.WorkerProc.__init__).parameters else {})
        proc = InProcWorkerProc(
            vllm_config=self.vllm_config,
            local_rank=0,
            rank=0,
            distributed_init_method=distributed_init_method,
            input_shm_handle=None,
            shared_worker_lock=multiprocessing.Lock(),
            **driver,
        )
        created["procs"].append(proc)
        self.rpc_broadcast_mq.procs.append(proc)
        self.workers = [mpe.WorkerProcHandle(proc=_NoProcess(), rank=0,
                                             worker_response_mq=proc.worker_response_mq,
                                             peer_worker_response_mqs=[], death_writer=None)]
        self.response_mqs = [proc.worker_response_mq]
        self.rpc_broadcast_mq.wait_until_ready()
        for mq in self.response_mqs:
            mq.wait_until_ready()
        self.futures_queue = collections.deque()
        if hasattr(self, "_post_init_executor"):  # not on vLLM 0.12
            self._post_init_executor()
        self.output_rank = self._get_output_rank()
        created["executors"].append(self)

    return types.SimpleNamespace(
        GPUModelRunner=GPUModelRunner, StandInModelRunner=StandInModelRunner,
        RehearsalWorker=RehearsalWorker, InProcWorkerProc=InProcWorkerProc,
        init_executor=_init_executor, mpe=mpe, gpu_worker=gpu_worker, created=created,
        ModelRunnerOutput=ModelRunnerOutput,
        two_phase=two_phase, saved={},
    )


def self_check(run, S):
    # Runner state protocol vs the real GPUModelRunner: probe its guards on a bare instance.
    R, G = S.StandInModelRunner, S.GPUModelRunner
    if S.two_phase:
        probe = R.__new__(R)
        probe.execute_model_state = object()
        try:
            G.execute_model(probe, None)
            ok, detail = False, "execute_model with pending state did not raise"
        except RuntimeError as e:
            ok, detail = "State error" in str(e), str(e)
        except Exception as e:  # noqa: BLE001
            ok, detail = False, f"{type(e).__name__}: {e}"
        run.check("StandInModelRunner state guard vs GPUModelRunner.execute_model", ok, detail)
        probe = R.__new__(R)
        probe.execute_model_state = None
        probe.kv_connector_output = None
        probe.use_async_scheduling = False
        try:
            # The stand-in hands this case to the real method, so what it answers is vLLM's own:
            # None up to 0.32, an empty ModelRunnerOutput from 0.33. The probe checks that the real
            # method runs on the state the stand-in keeps, and answers "nothing sampled".
            r = G.sample_tokens(probe, None)
            ok = r is None or (isinstance(r, S.ModelRunnerOutput) and not r.req_ids)
            detail = f"returned {r!r}"
        except Exception as e:  # noqa: BLE001
            ok, detail = False, f"{type(e).__name__}: {e}"
        run.check("StandInModelRunner no-state sample_tokens vs GPUModelRunner.sample_tokens", ok, detail)
        run.check("StandInModelRunner two-phase protocol vs GPUModelRunner.execute_model",
                  "execute_model_state" in code_names(G.execute_model),
                  "installed execute_model no longer keeps execute_model_state for sample_tokens")

    # Everything the installed Worker asks of its model runner on the paths we run.
    used = runner_attrs_used(S.gpu_worker.Worker, [
        "load_model", "get_kv_cache_spec", "initialize_from_config", "compile_or_warm_up_model",
        "execute_model", "sample_tokens", "get_model", "shutdown"])
    missing = sorted(a for a in used if a not in R.PROVIDES and a not in NOT_REACHED)
    run.check("StandInModelRunner vs Worker's use of model_runner", not missing,
              f"Worker uses {missing} which the stand-in does not provide")
    params = list(inspect.signature(G.load_model).parameters)[1:]
    run.check("StandInModelRunner.load_model vs GPUModelRunner.load_model",
              set(params) <= set(R.LOAD_MODEL_ARGS),
              f"{inspect.signature(G.load_model)}: the stand-in honours {sorted(R.LOAD_MODEL_ARGS)}")
    real = list(inspect.signature(G.initialize_kv_cache).parameters)
    later = [p for p in list(inspect.signature(G.initialize_kv_cache).parameters.values())[2:]
             if p.default is inspect.Parameter.empty]
    run.check("StandInModelRunner.initialize_kv_cache vs GPUModelRunner.initialize_kv_cache",
              real[:2] == ["self", "kv_cache_config"] and not later,
              f"{inspect.signature(G.initialize_kv_cache)}: the stand-in takes kv_cache_config, "
              "and later parameters only with defaults")
    for name in ("execute_model", "sample_tokens"):
        real, ours = inspect.signature(getattr(G, name)), inspect.signature(getattr(R, name))
        run.check(f"StandInModelRunner.{name} vs GPUModelRunner.{name}",
                  list(real.parameters) == list(ours.parameters), f"{real} != {ours}")

    # The real _update_states runs on the stand-in: everything it touches on self is there.
    unset = sorted(a for a in self_attrs(G._update_states)
                   if a not in R.INSTANCE_ATTRS and a not in R.SPEC_DECODE_ONLY and not hasattr(R, a))
    run.check("StandInModelRunner vs GPUModelRunner._update_states", not unset,
              f"_update_states uses {unset} which the stand-in does not set")
    # The token order re-stated from execute_model/_prepare_inputs reads these.
    wanted = {"req_ids", "num_scheduled_tokens"} - code_names(G.execute_model)
    wanted |= {"num_computed_tokens_cpu", "token_ids_cpu"} - code_names(G._prepare_inputs)
    run.check("StandInModelRunner token order vs GPUModelRunner._prepare_inputs", not wanted,
              f"the runner no longer orders tokens by {sorted(wanted)}")

    # Executor / WorkerProc seams, by the names their code uses and their signatures.
    mpe = S.mpe
    names = code_names(mpe.MultiprocExecutor.collective_rpc)
    run.check("in-process queues vs MultiprocExecutor.collective_rpc",
              {"rpc_broadcast_mq", "enqueue", "dequeue", "response_mqs"} <= names,
              "collective_rpc no longer talks to rpc_broadcast_mq/response_mqs")
    names = code_names(mpe.WorkerProc.__init__)
    run.check("InProcWorkerProc vs WorkerProc.__init__",
              {"_init_message_queues", "init_worker"} <= names,
              "WorkerProc.__init__ no longer builds its worker/queues the expected way")
    run.check("InProcWorkerProc._init_message_queues vs WorkerProc._init_message_queues",
              list(inspect.signature(mpe.WorkerProc._init_message_queues).parameters)
              == ["self", "input_shm_handle", "vllm_config"],
              str(inspect.signature(mpe.WorkerProc._init_message_queues)))
    names = code_names(mpe.WorkerProc.worker_busy_loop)
    # 0.33 moved the body of the loop (the call and its reply) into _execute_worker_rpc.
    for helper in ("_execute_worker_rpc",):
        if helper in names and hasattr(mpe.WorkerProc, helper):
            names |= code_names(getattr(mpe.WorkerProc, helper))
    run.check("BroadcastMQ vs WorkerProc.worker_busy_loop",
              {"rpc_broadcast_mq", "dequeue", "handle_output"} <= names,
              f"the loop no longer dequeues from rpc_broadcast_mq and replies by handle_output: {sorted(names)}")
    run.check("RehearsalWorker vs init_worker_distributed_environment",
              "backend" in inspect.signature(S.gpu_worker.init_worker_distributed_environment).parameters)


def install(S):
    S.saved["_init_executor"] = S.mpe.MultiprocExecutor._init_executor
    S.mpe.MultiprocExecutor._init_executor = S.init_executor


def restore(S):
    if "_init_executor" in S.saved:
        S.mpe.MultiprocExecutor._init_executor = S.saved.pop("_init_executor")


def worker_of(S):
    """The worker (speculators' extension mixed in) of the one in-process WorkerProc."""
    return S.created["procs"][0].worker.worker


def model_of(S):
    """The model the worker loaded (for the reference forward)."""
    return worker_of(S).model_runner.model


def forward_of(S):
    """The runner's model call: (input ids, positions, segments, KV history) -> hidden states."""
    return worker_of(S).model_runner._forward


def worker_failure(S):
    fails = S.created["worker_failures"]
    return fails[-1] if fails else None


def shutdown(S):
    import traceback

    for ex in S.created["executors"]:
        try:
            ex.shutdown()
        except Exception:  # noqa: BLE001
            traceback.print_exc()
    for proc in S.created["procs"]:
        try:
            proc.shutdown()  # real WorkerProc.shutdown: worker, model parallel, distributed env
        except Exception:  # noqa: BLE001
            traceback.print_exc()

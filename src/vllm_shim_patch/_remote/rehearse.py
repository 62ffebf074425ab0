"""Rehearse speculators' own VllmHiddenStatesGenerator against the installed vLLM, on CPU.

Runs INSIDE the target interpreter, loaded by `session.py` (which owns stdout and the timeout):
standard library plus what the target has (vllm, torch, transformers, speculators); nothing of
vllm_shim_patch. `prepare(request)` runs before anything imports vLLM (environment, temp dir);
`rehearse(request)` returns one JSON-able answer:

    {"ok": bool, "outcome": "passed"|"failed"|"cannot_rehearse"|"timeout"|"error",
     "stage": ..., "iterations": N, "captured": {layer: [[rows, hidden], ...]},
     "failure": {"exception", "speculators_frame", "vllm_frame", "raised_frame",
                 "side", "surfaced_as"} | null,
     "real": [...], "stood_in": [...], "checks": [...], "seconds": float}

What it exercises (REAL / STOOD_IN below are reported verbatim): speculators'
VllmHiddenStatesGenerator.__init__ and two generate() batches with prompts longer than one KV
block, against the installed vLLM's configs, KV cache utilities, StructuredOutputManager,
Scheduler, KV cache manager, Request and SamplingParams; the real MultiprocExecutor instance
(only _init_executor, which spawns processes and wires shared-memory queues, is replaced); the
real WorkerProc (only _init_message_queues replaced); vLLM's WorkerWrapperBase.init_worker
building the GPU Worker class with speculators' worker_extension_cls mixed in; the GPU Worker's
own methods (only init_device replaced); the real Llama model classes with only the attention
module stood in; speculators' _patched_forward bound to that real LlamaModel instance.

Never writes into site-packages (the session turns bytecode writing off); the model folder and
vLLM's cache live in a temp dir removed at the end.
"""

import ast
import collections
import functools
import inspect
import json
import os
import pickle
import shutil
import sys
import tempfile
import textwrap
import threading
import time
import traceback
import types

T0 = time.monotonic()

STATE = {
    "stage": "start",
    "iterations": 0,
    "captured": {},
    "checks": [],
    "tmpdir": None,
}

# Reported verbatim in the answer: what ran as the installed code, and what is a
# stand-in (and why). Kept next to the code that implements each stand-in.
REAL = [
    "speculators: VllmHiddenStatesGenerator.__init__/_create_vllm_config/_setup_capture/generate, "
    "HiddenStatesWorkerExtension, _patched_forward (as installed, patched or not)",
    "vllm.config: ModelConfig, CacheConfig, ParallelConfig, SchedulerConfig, DeviceConfig, LoadConfig, VllmConfig",
    "vllm.v1.core.kv_cache_utils (unify_hybrid_kv_cache_specs, _get_kv_cache_groups_uniform_spec, "
    "get_kv_cache_config_from_groups, hashing helpers)",
    "vllm.v1.structured_output.StructuredOutputManager",
    "vllm.v1.core.sched.scheduler.Scheduler with its KVCacheManager / BlockPool",
    "vllm.v1.request.Request, vllm.sampling_params.SamplingParams",
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
    "and the execute_model/sample_tokens state guards (called on the stand-in runner)",
    "vllm.model_executor.models.llama: LlamaForCausalLM, LlamaModel, LlamaDecoderLayer, LlamaMLP "
    "(built by vLLM's model registry + set_current_vllm_config), weights from vLLM's initialize_dummy_weights",
    "vllm.model_executor.layers: VocabParallelEmbedding, RMSNorm, SiluAndMul, Merged/RowParallelLinear, "
    "ParallelLMHead, LogitsProcessor (their forward_native paths)",
    "vllm.forward_context.set_forward_context, vllm.distributed parallel state",
]
STOOD_IN = [
    "model folder: a temp dir with a 4-layer Llama config.json and a word-level tokenizer.json, no weights "
    "(weights come from vLLM's own dummy initializer)",
    "current_platform.device_type='cuda' and torch.accelerator.current_accelerator() -> cuda: device "
    "inference (DeviceConfig() raises 'Failed to infer device type' on a machine without a GPU)",
    "torch.cuda.mem_get_info: answers a fixed 2 GiB free / 4 GiB total (no GPU to ask)",
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
    "model, runs it over the scheduled tokens on CPU, and keeps the installed runner's "
    "execute_model/sample_tokens state protocol (its state errors are raised by the real "
    "GPUModelRunner code)",
    "LlamaAttention: a CPU module with LlamaAttention's exact __init__/forward signatures (checked); it "
    "registers a KV-cache layer so the real get_kv_cache_spec finds it; no KV cache tensors, no attention "
    "backend (needs a GPU), per-token mixing only",
    "CustomOp kernel dispatch: forward_native is selected (CUDA kernels cannot run on CPU)",
    "model registry inspection subprocess: the Llama architectures are registered as already-imported "
    "classes, so vLLM's own _ModelInfo.from_model_cls runs in-process (no subprocess, no cache file)",
    "VLLM_CACHE_ROOT and TMPDIR: a temp dir of the rehearsal, removed at exit (it leaves nothing in ~/.cache/vllm "
    "or the temp folder, where torch would write a module and its inductor cache)",
]


def _answer(ok, outcome, failure=None, **extra):
    ans = {
        "ok": ok,
        "outcome": outcome,
        "stage": STATE["stage"],
        "iterations": STATE["iterations"],
        "captured": STATE["captured"],
        "failure": failure,
        "real": REAL,
        "stood_in": STOOD_IN,
        "checks": STATE["checks"],
        "seconds": round(time.monotonic() - T0, 2),
    }
    ans.update(extra)
    return ans


def _cleanup_tmp():
    tmp = STATE.get("tmpdir")
    if tmp:
        shutil.rmtree(tmp, ignore_errors=True)
        STATE["tmpdir"] = None


class CannotRehearse(Exception):
    """A stand-in no longer matches the vLLM code it replaces (not a speculators failure)."""


class WrongOutput(Exception):
    """generate() returned, but its hidden states do not match a per-prompt forward pass."""


class _Drained(BaseException):
    """Raised by the in-process worker inbox when empty, to leave the real busy loop.

    BaseException on purpose: WorkerProc.worker_busy_loop calls dequeue outside its
    `except Exception` block, so this propagates out of the loop untouched.
    """


# --------------------------------------------------------------------------
# Failure description: frames inside speculators / vllm
# --------------------------------------------------------------------------
_SITE = {}


def _pkg_root(modname):
    mod = sys.modules.get(modname)
    f = getattr(mod, "__file__", None)
    return os.path.dirname(os.path.abspath(f)) if f else None


def _frame(fs, root):
    base = os.path.dirname(root) if root else None
    fn = os.path.abspath(fs.filename)
    if not (base and fn.startswith(base + os.sep)):
        base = _SITE.get("base")  # relative to vLLM's site-packages when outside the package
    rel = os.path.relpath(fn, base) if base and fn.startswith(base + os.sep) else fn
    return {"file": rel, "line": fs.lineno, "code": (fs.line or "").strip(), "function": fs.name}


def _last_frame_in(frames, root):
    if not root:
        return None
    for fs in reversed(frames):
        if os.path.abspath(fs.filename).startswith(root + os.sep):
            return _frame(fs, root)
    return None


def describe(exc):
    frames = traceback.extract_tb(exc.__traceback__)
    spec, vllm = _pkg_root("speculators"), _pkg_root("vllm")
    if vllm:
        _SITE["base"] = os.path.dirname(vllm)
    raised = frames[-1] if frames else None
    where = "other"
    if raised is not None:
        fn = os.path.abspath(raised.filename)
        if spec and fn.startswith(spec + os.sep):
            where = "speculators"
        elif vllm and fn.startswith(vllm + os.sep):
            where = "vllm"
        elif fn == os.path.abspath(__file__):
            where = "rehearse-stand-in"
    msg = " | ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    if len(msg) > 500:
        msg = msg[:497] + "..."
    return {
        "exception": f"{type(exc).__name__}: {msg}",
        "speculators_frame": _last_frame_in(frames, spec),
        "vllm_frame": _last_frame_in(frames, vllm),
        "raised_frame": _frame(raised, vllm if where == "vllm" else spec) if raised else None,
        "raised_in": where,
    }


# --------------------------------------------------------------------------
# The tiny model folder (stand-in for a real checkpoint)
# --------------------------------------------------------------------------
VOCAB = 128
HIDDEN = 64
NUM_LAYERS = 4


def write_model_folder(path):
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": HIDDEN,
        "intermediate_size": 128,
        "num_hidden_layers": NUM_LAYERS,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": HIDDEN // 4,
        "hidden_act": "silu",
        "max_position_embeddings": 2048,
        "rms_norm_eps": 1e-5,
        "vocab_size": VOCAB,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
    }
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for i in range(3, VOCAB):
        vocab[f"w{i}"] = i
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": True}
            for t, i in (("<unk>", 0), ("<s>", 1), ("</s>", 2))
        ],
        "normalizer": None,
        "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": None,
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"},
    }
    tok_cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "model_max_length": 2048,
    }
    for name, obj in (("config.json", config), ("tokenizer.json", tokenizer),
                      ("tokenizer_config.json", tok_cfg)):
        with open(os.path.join(path, name), "w") as f:
            json.dump(obj, f)


# --------------------------------------------------------------------------
# Stand-ins. Built after vLLM is importable; each one documents WHY it exists.
# --------------------------------------------------------------------------
def build_standins():
    import torch
    from torch import nn

    from vllm.config import set_current_vllm_config
    from vllm.distributed import destroy_distributed_environment, destroy_model_parallel  # noqa: F401
    from vllm.forward_context import set_forward_context
    from vllm.model_executor.custom_op import CustomOp
    from vllm.model_executor.layers.attention_layer_base import AttentionLayerBase
    from vllm.model_executor.model_loader.utils import get_model_architecture
    from vllm.model_executor.model_loader.weight_utils import initialize_dummy_weights
    from vllm.model_executor.models import llama as vllm_llama
    from vllm.utils.network_utils import get_distributed_init_method, get_loopback_ip, get_open_port
    from vllm.utils.torch_utils import kv_cache_dtype_str_to_dtype, set_default_torch_dtype
    from vllm.v1.executor import multiproc_executor as mpe
    from vllm.v1.kv_cache_interface import FullAttentionSpec
    from vllm.v1.outputs import ModelRunnerOutput
    from vllm.v1.worker import gpu_worker
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    try:
        from vllm.utils.torch_utils import set_random_seed
    except ImportError:  # pragma: no cover - older layouts
        set_random_seed = getattr(gpu_worker, "set_random_seed", lambda seed: None)

    two_phase = hasattr(GPUModelRunner, "sample_tokens")

    # ---------------- attention stand-in --------------------------------
    class StandInKVLayer(nn.Module, AttentionLayerBase):
        """Registers in static_forward_context exactly like vLLM's Attention does, so the
        REAL GPUModelRunner.get_kv_cache_spec finds it and builds the real FullAttentionSpec.
        WHY a stand-in: vLLM's Attention picks a GPU attention backend at construction."""

        def __init__(self, num_kv_heads, head_size, prefix, cache_config, model_dtype):
            nn.Module.__init__(self)
            from vllm.config import get_current_vllm_config

            self.layer_name = prefix
            self.num_kv_heads = num_kv_heads
            self.head_size = head_size
            cache_dtype = cache_config.cache_dtype if cache_config is not None else "auto"
            self.kv_cache_torch_dtype = kv_cache_dtype_str_to_dtype(
                cache_dtype, get_current_vllm_config().model_config)
            ctx = get_current_vllm_config().compilation_config.static_forward_context
            if prefix in ctx:
                raise ValueError(f"Duplicate layer name: {prefix}")
            ctx[prefix] = self

        def get_attn_backend(self):  # no GPU attention backend on CPU
            raise NotImplementedError("stand-in attention has no backend")

        def get_kv_cache_spec(self, vllm_config):
            return FullAttentionSpec(
                block_size=vllm_config.cache_config.block_size,
                num_kv_heads=self.num_kv_heads,
                head_size=self.head_size,
                dtype=self.kv_cache_torch_dtype,
            )

    class StandInAttention(nn.Module):
        """Replaces LlamaAttention only. Same __init__/forward signatures (checked at run time
        against the installed LlamaAttention). Per-token mixing that depends on the position,
        so mis-attributed tokens or positions show up when the captured states are verified."""

        def __init__(self, config, hidden_size, num_heads, num_kv_heads,
                     max_position_embeddings=8192, quant_config=None, bias=False,
                     bias_o_proj=False, cache_config=None, prefix="",
                     attn_type=vllm_llama.AttentionType.DECODER):
            super().__init__()
            head_dim = getattr(config, "head_dim", None) or hidden_size // num_heads
            self.proj = nn.Linear(hidden_size, hidden_size, bias=False)
            self.attn = StandInKVLayer(num_kv_heads, head_dim, f"{prefix}.attn", cache_config,
                                       torch.get_default_dtype())

        def forward(self, positions, hidden_states):
            pos = positions.to(hidden_states.dtype).unsqueeze(-1)
            return torch.tanh(self.proj(hidden_states)) + 1e-3 * torch.sin(pos)

    layer_type = functools.partial(vllm_llama.LlamaDecoderLayer, attn_layer_type=StandInAttention)

    # ---------------- model runner stand-in ------------------------------
    class _InputBatch:
        """What speculators 0.4.0 reads from the runner: input_batch.req_id_to_index."""

        def __init__(self):
            self.req_ids = []
            self.req_id_to_index = {}

    class StandInModelRunner(GPUModelRunner):
        """WHY: GPUModelRunner needs CUDA (pinned buffers, attention backends, CUDA graphs).
        This subclass skips GPUModelRunner.__init__, runs the model over the scheduled tokens on
        CPU and keeps the installed runner's execute_model/sample_tokens state protocol: on a
        protocol violation it calls the REAL GPUModelRunner method, which raises its own error."""

        PROVIDES = {  # attributes Worker code may touch on the runner (drift check)
            "load_model", "get_kv_cache_spec", "initialize_kv_cache", "execute_model",
            "sample_tokens", "_dummy_run", "_dummy_sampler_run", "maybe_remove_all_loras",
            "lora_config", "is_pooling_model", "attn_groups", "model", "model_memory_usage",
            "get_model", "get_supported_tasks", "take_draft_token_ids", "reset_mm_cache",
            "input_batch", "shutdown",
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
            self.input_batch = _InputBatch()
            self.kv_cache_config = None
            self._requests = {}  # req_id -> prompt token ids
            self.forward_passes = 0

        # -- model -----------------------------------------------------------
        def load_model(self, eep_scale_up=False):
            # Same steps as vLLM's DummyModelLoader: resolve the architecture through the real
            # registry, build under set_default_torch_dtype + set_current_vllm_config, then
            # vLLM's initialize_dummy_weights. Only layer_type is passed to swap attention.
            mc = self.model_config
            model_cls, _arch = get_model_architecture(mc)
            with set_default_torch_dtype(mc.dtype), torch.device("cpu"):
                with set_current_vllm_config(self.vllm_config, check_compile=True, prefix=""):
                    model = model_cls(vllm_config=self.vllm_config, prefix="", layer_type=layer_type)
            initialize_dummy_weights(model, mc)
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

        def initialize_kv_cache(self, kv_cache_config):
            # The real runner allocates one KV tensor per layer; check the config names
            # exactly the attention layers the model registered, allocate nothing.
            names = {n for g in kv_cache_config.kv_cache_groups for n in g.layer_names}
            ours = set(self.get_kv_cache_spec())
            if names != ours:
                raise RuntimeError(f"KV cache config layers {sorted(names)} != model layers {sorted(ours)}")
            self.kv_cache_config = kv_cache_config

        # -- forward passes --------------------------------------------------
        def _forward(self, input_ids, positions):
            n = int(input_ids.shape[0])
            with set_forward_context(None, self.vllm_config, num_tokens=n):
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

        def _update_states(self, so):
            for rid in so.finished_req_ids:
                self._requests.pop(rid, None)
                if rid in self.input_batch.req_ids:
                    self.input_batch.req_ids.remove(rid)
            for new in so.scheduled_new_reqs:
                self._requests[new.req_id] = list(new.prompt_token_ids or [])
                self.input_batch.req_ids.append(new.req_id)
            self.input_batch.req_id_to_index = {r: i for i, r in enumerate(self.input_batch.req_ids)}

        @torch.inference_mode()
        def execute_model(self, scheduler_output, intermediate_tensors=None):
            if self.execute_model_state is not None:
                # Protocol violation: let the installed GPUModelRunner raise its own error.
                return GPUModelRunner.execute_model(self, scheduler_output, intermediate_tensors)
            so = scheduler_output
            self._update_states(so)
            computed = {n.req_id: n.num_computed_tokens for n in so.scheduled_new_reqs}
            cached = so.scheduled_cached_reqs
            for rid, nct in zip(cached.req_ids, cached.num_computed_tokens):
                computed[rid] = nct
            ids, pos, last_idx, req_ids = [], [], [], []
            for rid in self.input_batch.req_ids:
                n = so.num_scheduled_tokens.get(rid, 0)
                if not n:
                    continue
                start = computed.get(rid, 0)
                prompt = self._requests[rid]
                for p in range(start, start + n):
                    ids.append(prompt[p] if p < len(prompt) else 0)
                    pos.append(p)
                last_idx.append(len(ids) - 1)
                req_ids.append(rid)
            if not ids:
                out = ModelRunnerOutput(req_ids=[], req_id_to_index={})
                return self._finish(so, None, req_ids, out)
            self.forward_passes += 1
            STATE["iterations"] += 1
            hidden = self._forward(torch.tensor(ids, dtype=torch.long), torch.tensor(pos, dtype=torch.long))
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
            return ModelRunnerOutput(
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

    # ---------------- worker stand-in (init_device only) -------------------
    class RehearsalWorker(gpu_worker.Worker):
        """vLLM's GPU Worker with ONE override: init_device. WHY: the real one asserts CUDA
        devices, calls torch.cuda.set_device, takes a CUDA memory snapshot and builds
        GPUModelRunner. Everything else (load_model, get_kv_cache_spec, initialize_from_config,
        compile_or_warm_up_model, execute_model, sample_tokens) is the installed Worker code."""

        def init_device(self):
            self.device = torch.device("cpu")
            gpu_worker.init_worker_distributed_environment(
                self.vllm_config, self.rank, self.distributed_init_method, self.local_rank, "gloo")
            set_random_seed(self.model_config.seed)
            self.model_runner = StandInModelRunner(self.vllm_config, self.device)

    # ---------------- message-queue stand-ins ------------------------------
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
            raise _Drained()

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
                except _Drained:
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

    # vLLM inspects a lazily registered architecture in a *subprocess* ("to avoid initializing
    # CUDA"), ~6 s here, unless ~/.cache/vllm/modelinfos already has it. There is no CUDA to
    # protect and the rehearsal spawns no processes: register the already-imported class, so
    # vLLM's own _ModelInfo.from_model_cls inspects it in-process.
    from vllm.model_executor.models import registry as vllm_registry

    for arch, entry in list(vllm_registry.ModelRegistry.models.items()):
        if getattr(entry, "module_name", None) == vllm_llama.__name__ and hasattr(vllm_llama, entry.class_name):
            vllm_registry.ModelRegistry.models[arch] = vllm_registry._RegisteredModel.from_model_cls(
                getattr(vllm_llama, entry.class_name))

    created = {"executors": [], "procs": [], "worker_failures": []}

    class _WorkerFailureTap(__import__("logging").Handler):
        """WorkerProc.worker_busy_loop logs every worker exception with logger.exception()
        before sending only str(e) back; keep the exception object (with its traceback)
        so the report can name the worker-side frames."""

        def emit(self, record):
            if record.exc_info and record.exc_info[1] is not None:
                created["worker_failures"].append(record.exc_info[1])

    _tap = _WorkerFailureTap(level=0)
    mpe.logger.addHandler(_tap)
    worker_mod = types.ModuleType("_rehearse_standins")
    worker_mod.RehearsalWorker = RehearsalWorker
    sys.modules["_rehearse_standins"] = worker_mod

    def _init_executor(self):
        """Replaces MultiprocExecutor._init_executor (only). Sets the attributes the real one
        sets; the worker is the real WorkerProc built in this process; no processes, no shm."""
        self._finalizer = __import__("weakref").finalize(self, self.shutdown)
        self.is_failed = False
        self.shutdown_event = threading.Event()
        self.failure_callback = None
        tp_size, pp_size, pcp_size = self._get_parallel_sizes()
        if self.world_size != 1 or self.local_world_size != 1:
            raise CannotRehearse(f"rehearsal runs one in-process worker; world_size={self.world_size}")
        # Device/platform stand-in: on a GPU platform check_and_update_config would have set
        # worker_cls to vllm.v1.worker.gpu_worker.Worker; use its CPU-capable subclass.
        self.parallel_config.worker_cls = "_rehearse_standins.RehearsalWorker"
        distributed_init_method = get_distributed_init_method(get_loopback_ip(), get_open_port())
        self.rpc_broadcast_mq = BroadcastMQ()
        import multiprocessing

        proc = InProcWorkerProc(
            vllm_config=self.vllm_config,
            local_rank=0,
            rank=0,
            distributed_init_method=distributed_init_method,
            input_shm_handle=None,
            shared_worker_lock=multiprocessing.Lock(),
            is_driver_worker=self._is_driver_worker(0),
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
        self._post_init_executor()
        self.output_rank = self._get_output_rank()
        created["executors"].append(self)

    return types.SimpleNamespace(
        torch=torch, GPUModelRunner=GPUModelRunner, StandInModelRunner=StandInModelRunner,
        StandInAttention=StandInAttention, RehearsalWorker=RehearsalWorker,
        InProcWorkerProc=InProcWorkerProc, init_executor=_init_executor, mpe=mpe,
        gpu_worker=gpu_worker, vllm_llama=vllm_llama, created=created, two_phase=two_phase,
        layer_type=layer_type,
    )


# --------------------------------------------------------------------------
# Self-checks: do the stand-ins still match the vLLM code they replace?
# --------------------------------------------------------------------------
def _sig(fn):
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


def _check(name, ok, detail=""):
    STATE["checks"].append({"check": name, "ok": bool(ok), **({"detail": detail} if detail and not ok else {})})
    if not ok:
        raise CannotRehearse(f"stand-in {name.split(' vs ')[0]} no longer matches vLLM's "
                             f"{name.split(' vs ')[-1]}: {detail}")


def _runner_attrs_used(cls, methods):
    """`self.model_runner.X` attributes used by the given Worker methods (AST of installed source)."""
    used = {}
    for m in methods:
        fn = getattr(cls, m, None)
        if fn is None:
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
        except (OSError, TypeError, SyntaxError):
            continue
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute)
                    and node.value.attr == "model_runner"):
                used.setdefault(node.attr, set()).add(m)
    return used


def self_check(S):
    llama = S.vllm_llama
    # Attention stand-in vs LlamaAttention (constructor keywords and forward call).
    _check("StandInAttention.__init__ vs LlamaAttention.__init__",
           _sig(S.StandInAttention.__init__) == _sig(llama.LlamaAttention.__init__),
           f"{inspect.signature(llama.LlamaAttention.__init__)}")
    _check("StandInAttention.forward vs LlamaAttention.forward",
           [p[:2] for p in _sig(S.StandInAttention.forward)] == [p[:2] for p in _sig(llama.LlamaAttention.forward)],
           f"{inspect.signature(llama.LlamaAttention.forward)}")
    # The seams in the real model classes we build through.
    _check("layer_type seam vs LlamaForCausalLM.__init__",
           "layer_type" in inspect.signature(llama.LlamaForCausalLM.__init__).parameters)
    _check("attn_layer_type seam vs LlamaDecoderLayer.__init__",
           "attn_layer_type" in inspect.signature(llama.LlamaDecoderLayer.__init__).parameters)
    fwd = [p[:2] for p in _sig(llama.LlamaDecoderLayer.forward)]
    _check("decoder layer call vs LlamaDecoderLayer.forward",
           [n for n, _ in fwd] == ["self", "positions", "hidden_states", "residual"], str(fwd))

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
        _check("StandInModelRunner state guard vs GPUModelRunner.execute_model", ok, detail)
        probe = R.__new__(R)
        probe.execute_model_state = None
        probe.kv_connector_output = None
        probe.use_async_scheduling = False
        try:
            r = G.sample_tokens(probe, None)
            ok, detail = r is None, f"returned {r!r}"
        except Exception as e:  # noqa: BLE001
            ok, detail = False, f"{type(e).__name__}: {e}"
        _check("StandInModelRunner no-state sample_tokens vs GPUModelRunner.sample_tokens", ok, detail)
        src = inspect.getsource(G.execute_model)
        _check("StandInModelRunner two-phase protocol vs GPUModelRunner.execute_model",
               "self.execute_model_state = " in src and "return None" in src,
               "installed execute_model no longer stores state and returns None")

    # Everything the installed Worker asks of its model runner on the paths we run.
    used = _runner_attrs_used(S.gpu_worker.Worker, [
        "load_model", "get_kv_cache_spec", "initialize_from_config", "compile_or_warm_up_model",
        "execute_model", "sample_tokens", "get_model", "shutdown"])
    not_reached = {  # only on paths this rehearsal cannot take; reason recorded
        "capture_model": "enforce_eager=True (speculators sets it)",
        "_determine_batch_execution_and_padding": "pipeline parallel only",
        "_dummy_pooler_run": "pooling models only",
        "peak_activation_memory": "set by determine_available_memory, not called",
        "init_fp8_kv_scales": "sleep mode only",
    }
    missing = sorted(a for a in used if a not in R.PROVIDES and a not in not_reached)
    _check("StandInModelRunner vs Worker's use of model_runner", not missing,
           f"Worker uses {missing} which the stand-in does not provide")

    # Executor / WorkerProc seams.
    mpe = S.mpe
    src = inspect.getsource(mpe.MultiprocExecutor.collective_rpc)
    _check("in-process queues vs MultiprocExecutor.collective_rpc",
           "self.rpc_broadcast_mq.enqueue(" in src and ".dequeue(" in src and "self.response_mqs" in src,
           "collective_rpc no longer talks to rpc_broadcast_mq/response_mqs")
    init_src = inspect.getsource(mpe.WorkerProc.__init__)
    _check("InProcWorkerProc vs WorkerProc.__init__",
           "self._init_message_queues(" in init_src and "init_worker(" in init_src,
           "WorkerProc.__init__ no longer builds its worker/queues the expected way")
    loop_src = inspect.getsource(mpe.WorkerProc.worker_busy_loop)
    _check("BroadcastMQ vs WorkerProc.worker_busy_loop",
           "self.rpc_broadcast_mq.dequeue(" in loop_src and "handle_output" in loop_src)
    _check("RehearsalWorker vs init_worker_distributed_environment",
           "backend" in inspect.signature(S.gpu_worker.init_worker_distributed_environment).parameters)


# --------------------------------------------------------------------------
# Device / memory stand-ins
# --------------------------------------------------------------------------
def install_device_standins():
    import torch

    from vllm.platforms import current_platform

    # DeviceConfig() infers the device from current_platform.device_type; without a GPU
    # vLLM resolves UnspecifiedPlatform whose device_type is "" -> "Failed to infer device type".
    current_platform.device_type = "cuda"
    free, total = 2 * 1024**3, 4 * 1024**3
    torch.cuda.mem_get_info = lambda device=None: (free, total)
    # speculators 0.4.0 asks torch.accelerator which device module to query.
    if hasattr(torch, "accelerator"):
        torch.accelerator.current_accelerator = lambda *a, **k: torch.device("cuda")
    torch.cuda.empty_cache = lambda: None


# --------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------
def make_prompts(lengths, seed):
    import random

    rng = random.Random(seed)
    return [[rng.randrange(3, VOCAB) for _ in range(n)] for n in lengths]


def reference_states(model, prompt, layers):
    """Expected captures for one prompt run alone: hidden+residual after each requested layer."""
    import torch

    base = model.model
    with torch.inference_mode():
        ids = torch.tensor(prompt, dtype=torch.long)
        pos = torch.arange(len(prompt), dtype=torch.long)
        h = base.embed_tokens(ids)
        res = None
        out = {}
        for i, layer in enumerate(base.layers):
            h, res = layer(positions=pos, hidden_states=h, residual=res)
            if i in layers:
                out[i] = (h + res).float()
    return out


def run(req):
    layers = req.get("layers") or [1, 2]
    batches = req.get("batches") or [[37, 21], [53, 18]]

    STATE["stage"] = "import"
    try:
        import speculators
        import vllm
    except Exception as e:  # noqa: BLE001 - nothing of speculators' own code path ran yet
        raise CannotRehearse(f"{type(e).__name__}: {e}") from None
    import importlib.metadata as md

    try:
        spec_version = md.version("speculators")
    except md.PackageNotFoundError:
        spec_version = getattr(speculators, "__version__", None)
    STATE["speculators"] = {"version": spec_version, "file": speculators.__file__}
    supported = req.get("supported") or []
    if spec_version not in supported:
        raise CannotRehearse(f"speculators {spec_version} is not supported (supported: {', '.join(supported)})")
    # From here a failure is speculators' own (an import of a vLLM name that moved, say).
    from speculators.data_generation import vllm_hidden_states_generator as gen_mod

    STATE["vllm"] = {"version": getattr(vllm, "__version__", None)}

    STATE["stage"] = "setup"
    install_device_standins()
    S = build_standins()
    STATE["stage"] = "self-check"
    self_check(S)

    model_dir = os.path.join(STATE["tmpdir"], "model")
    os.mkdir(model_dir)
    write_model_folder(model_dir)

    orig_init = S.mpe.MultiprocExecutor._init_executor
    S.mpe.MultiprocExecutor._init_executor = S.init_executor
    generator = None
    try:
        STATE["stage"] = "init"
        generator = gen_mod.VllmHiddenStatesGenerator(
            model_path=model_dir, layer_ids=layers, max_model_len=512, gpu_memory_utilization=0.5)
        STATE["iterations"] = 0  # count generate()'s forward passes only, not warm-up
        model = S.created["procs"][0].worker.worker.model_runner.model
        worst = 0.0  # max relative difference vs a per-prompt forward of the same model
        for b, lengths in enumerate(batches):
            STATE["stage"] = f"generate-{b + 1}"
            prompts = make_prompts(lengths, seed=b)
            results = generator.generate(prompts)
            STATE["stage"] = f"verify-{b + 1}"
            if len(results) != len(prompts):
                raise WrongOutput(f"{len(results)} results for {len(prompts)} prompts")
            for p, r in zip(prompts, results):
                ref = reference_states(model, p, set(layers))
                for lid, h in zip(layers, r["hidden_states"]):
                    STATE["captured"].setdefault(str(lid), []).append(list(h.shape))
                    if list(h.shape) != list(ref[lid].shape):
                        raise WrongOutput(f"layer {lid}: captured {list(h.shape)}, expected {list(ref[lid].shape)}")
                    scale = float(ref[lid].abs().max()) or 1.0
                    worst = max(worst, float((h.float() - ref[lid]).abs().max()) / scale)
            if worst > 1e-3:
                raise WrongOutput(f"captured hidden states differ from a per-prompt forward (relative {worst:.3g})")
        STATE["max_rel_diff"] = worst
        STATE["stage"] = "done"
    finally:
        S.mpe.MultiprocExecutor._init_executor = orig_init
        STATE["_S"] = S
        STATE["_generator"] = generator


def shutdown_all():
    S = STATE.pop("_S", None)
    gen = STATE.pop("_generator", None)
    if S is None:
        return
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
    del gen


def worker_failure(S):
    if S is None:
        return None
    fails = S.created["worker_failures"]
    return fails[-1] if fails else None


ENVIRONMENT = (("VLLM_NO_USAGE_STATS", "1"), ("DO_NOT_TRACK", "1"), ("HF_HUB_OFFLINE", "1"),
               ("TRANSFORMERS_OFFLINE", "1"), ("TOKENIZERS_PARALLELISM", "false"))


def prepare(req):
    """Before anything imports vLLM: one temp dir for everything the rehearsal writes (the model
    folder and vLLM's own cache), so it leaves no trace in the user's ~/.cache/vllm."""
    global T0
    T0 = time.monotonic()
    tmp = tempfile.mkdtemp(prefix="vsp-rehearse-")
    STATE["tmpdir"] = tmp
    # Whatever torch and vLLM put in the temp folder (torch writes a module there at import, the
    # inductor cache lives there) goes inside ours, and is removed with it.
    inner = os.path.join(tmp, "tmp")
    os.mkdir(inner)
    os.environ["TMPDIR"] = tempfile.tempdir = inner
    os.environ["VLLM_CACHE_ROOT"] = os.path.join(tmp, "vllm-cache")
    if not req.get("verbose"):
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    for k, v in ENVIRONMENT:
        os.environ.setdefault(k, v)


def timed_out(seconds):
    """The answer when the session's watchdog fires (the run is abandoned, the process exits).

    Only time spent in speculators' own code path is a hang worth reporting as a failure; running
    out of time while importing vLLM or building the stand-ins says nothing about speculators."""
    _cleanup_tmp()
    if STATE["stage"] in ("start", "import", "setup", "self-check"):
        return _answer(False, "cannot_rehearse", {
            "exception": f"cannot rehearse: speculators' code was not reached within {seconds:g}s "
                         f"(stage {STATE['stage']}: importing vLLM or building the stand-ins took that long); "
                         f"give a longer --timeout"})
    return _answer(False, "timeout", {"exception": f"TimeoutError: rehearsal exceeded {seconds:g}s"})


def rehearse(req):
    """Run the rehearsal; always returns an answer (a failure of ours is outcome "error")."""
    if STATE["tmpdir"] is None:
        prepare(req)
    try:
        run(req)
        ans = _answer(True, "passed", None, max_rel_diff=STATE.get("max_rel_diff"))
    except CannotRehearse as e:
        ans = _answer(False, "cannot_rehearse", {"exception": f"cannot rehearse: {e}"})
    except Exception as e:  # noqa: BLE001
        traceback.print_exc()
        ans = _classify(e)
    ans["versions"] = {"speculators": STATE.get("speculators"), "vllm": STATE.get("vllm")}
    try:
        shutdown_all()
    except Exception:  # noqa: BLE001
        traceback.print_exc()
    _cleanup_tmp()
    ans["seconds"] = round(time.monotonic() - T0, 2)
    return ans


def _classify(e):
    failure = describe(e)
    if STATE["stage"] == "setup":
        # Our stand-ins do not fit this vLLM's layout: nothing was learnt about speculators.
        failure["exception"] = f"cannot rehearse on this vLLM: {failure['exception']}"
        return _answer(False, "cannot_rehearse", failure)
    failure["side"] = "main"
    wexc = worker_failure(STATE.get("_S"))
    if wexc is not None and "Worker failed with error" in str(e):
        surfaced = failure
        failure = describe(wexc)
        failure["side"] = "worker"
        failure["surfaced_as"] = surfaced
        if failure["speculators_frame"] is None:
            # Raised on the worker outside speculators' code (e.g. the runner's state error):
            # the speculators frame is the call that made the RPC.
            failure["speculators_frame"] = surfaced["speculators_frame"]
    if not isinstance(e, WrongOutput) and failure.get("raised_in") == "rehearse-stand-in" \
            and not failure.get("speculators_frame"):
        return _answer(False, "cannot_rehearse", failure)
    return _answer(False, "failed", failure)

"""The worker and runner of Model Runner V2 as the rehearsal runs them (imports vLLM: imported only
once the adapter fits).

The runner is vLLM's own V2 GPUModelRunner, built by vLLM's own Worker through its
`_make_model_runner` seam; the subclass below adds observation only (each forward reported, the
blocks it uses checked against the committed KV cache) and builds the model on CPU with the
rehearsal's weights before handing it to V2's own load_model. The worker stands in for what needs
a GPU: init_device, and the extensible KV cache's commits (initialize_from_config takes the
allocate-up-front path, with the commitments kept by `kvcache.Commitments`).
"""

import torch
from vllm.config import set_current_vllm_config
from vllm.forward_context import set_forward_context
from vllm.model_executor.custom_op import CustomOp
from vllm.model_executor.model_loader.utils import get_model_architecture
from vllm.utils.torch_utils import set_default_torch_dtype, set_random_seed
from vllm.v1.worker import gpu_worker
from vllm.v1.worker.gpu.model_runner import GPUModelRunner

from ... import attention, device
from ...families import common, moe
from ..v1_engine import MODULE

QUALNAME = f"{MODULE}.RehearsalV2Worker"


def _no_report():
    pass


class RehearsalV2Runner(GPUModelRunner):
    """V2's GPUModelRunner, every method its own; observed at two points of execute_model:
    prepare_inputs (the batch of this forward, in V2's order) and prepare_attn (the block tables
    V2's kernels gathered for it)."""

    rehearse_on_forward = staticmethod(_no_report)
    rehearse_kv = None  # kvcache.Commitments of the worker
    # Weights by parameter name (a world of many ranks: every rank's shard a slice of one model).
    WEIGHTS_BY_NAME = False

    def __init__(self, vllm_config, device_):
        super().__init__(vllm_config, device_)
        self.steps = []  # one record per forward: what the run reports and checks
        self.kv_history = {}  # the reference forward's per-request history (attention.Metadata)

    def load_model(self, load_dummy_weights=False, *args, model=None, **kwargs):
        """The model built as the V1 rehearsal builds it (vLLM's registry class on CPU, the wide
        dummy weights, CustomOps on forward_native), then V2's own load_model with it."""
        if model is None:
            model = build_model(self.vllm_config, self.WEIGHTS_BY_NAME)
        return super().load_model(load_dummy_weights, *args, model=model, **kwargs)

    def prepare_inputs(self, scheduler_output, *args, **kwargs):
        batch = super().prepare_inputs(scheduler_output, *args, **kwargs)
        n = int(batch.num_reqs)
        computed = batch.num_computed_tokens_np[:n]
        scheduled = batch.num_scheduled_tokens[:n]
        self.steps.append({
            "scheduler": list(scheduler_output.num_scheduled_tokens), "runner": list(batch.req_ids),
            "tokens": int(batch.num_tokens),
            "chunked": bool(((computed + scheduled) < batch.prefill_len_np[:n]).any()),
            "requests": sorted(self.req_states.req_id_to_index)})
        return batch

    def prepare_attn(self, input_batch):
        block_tables, slot_mappings = super().prepare_attn(input_batch)
        n = int(input_batch.num_reqs)
        highest = max((int(t[:n].max()) for t in block_tables if t.numel() and n), default=0)
        if self.rehearse_kv is not None:
            self.rehearse_kv.check(highest)
        self.rehearse_on_forward()
        return block_tables, slot_mappings

    def _forward(self, input_ids, positions, segments=None, history=None):
        return reference_forward(self, input_ids, positions, segments, history)


def build_model(vllm_config, by_name=False):
    """vLLM's registry class of the model built on CPU as the V1 rehearsal builds it: the wide
    dummy weights (or each drawn whole by name), CustomOps on forward_native."""
    mc = vllm_config.model_config
    model_cls, _arch = get_model_architecture(mc)
    with set_default_torch_dtype(mc.dtype), torch.device("cpu"), device.building():
        with set_current_vllm_config(vllm_config, check_compile=True, prefix=""):
            model = model_cls(vllm_config=vllm_config, prefix="")
    common.init_weights(model, mc, by_name=by_name)
    for m in model.modules():
        if isinstance(m, CustomOp):
            m._forward_method = m.forward_native
    moe.after_weights(model, vllm_config)
    return model.eval()


def reference_forward(holder, input_ids, positions, segments=None, history=None):
    """The reference forward: `holder`'s model over one request's tokens, attention over a
    per-request history (the CPU backend's own path through the same layers)."""
    n = int(input_ids.shape[0])
    meta = None if segments is None else attention.Metadata(
        segments, holder.kv_history if history is None else history)
    with set_forward_context(meta, holder.vllm_config, num_tokens=n):
        return holder.model(input_ids=input_ids, positions=positions, intermediate_tensors=None,
                            inputs_embeds=None)


class Reference:
    """The unsharded model of a world of many ranks, in the parent (`v1_engine.reference.build`
    builds it with this class): weights by name, so each rank's shard is a slice of it."""

    def __init__(self, vllm_config, device_):
        self.vllm_config, self.model, self.kv_history = vllm_config, None, {}

    def load_model(self):
        # As the Worker before its runner: MoE's modular kernels take their scratch from the
        # workspace manager, and the parent has no Worker.
        if hasattr(gpu_worker, "init_workspace_manager"):
            gpu_worker.init_workspace_manager(torch.device("cpu"))
        self.model = build_model(self.vllm_config, by_name=True)

    def _forward(self, input_ids, positions, segments=None, history=None):
        return reference_forward(self, input_ids, positions, segments, history)


class RehearsalV2Worker(gpu_worker.Worker):
    """vLLM's GPU Worker; stood in: init_device (CPU, gloo), initialize_from_config's extensible
    path (the cache allocated up front, its commitments kept), extend_kv_cache (the commit)."""

    rehearse_runner = RehearsalV2Runner
    rehearse_kv = None

    def init_device(self):
        # The real one selects a CUDA device, takes a memory snapshot and sizes the request from it.
        self.device = torch.device("cpu")
        gpu_worker.init_worker_distributed_environment(
            self.vllm_config, self.rank, self.distributed_init_method, self.local_rank, "gloo")
        set_random_seed(self.model_config.seed)
        self._init_workspace_and_model_runner()

    def _make_model_runner(self):
        return self.rehearse_runner(self.vllm_config, self.device)

    def initialize_from_config(self, kv_cache_config):
        extensible = bool(getattr(self.cache_config, "enable_extensible_kv_cache", False))
        self.rehearse_kv.initialized(kv_cache_config.num_blocks, extensible)
        if not extensible:
            return super().initialize_from_config(kv_cache_config)
        # The extensible path maps device virtual memory; on CPU the cache is allocated up front
        # and the commitments say which of its blocks would have memory behind them.
        self.cache_config.enable_extensible_kv_cache = False
        try:
            return super().initialize_from_config(kv_cache_config)
        finally:
            self.cache_config.enable_extensible_kv_cache = True

    def extend_kv_cache(self, num_blocks):
        self.rehearse_kv.extended(num_blocks)
        self.cache_config.num_gpu_blocks = num_blocks


def for_run(on_forward, commitments, by_name=False):
    """The worker class of one run: its runner reports each forward to `on_forward` and checks the
    blocks it uses against `commitments` (a kvcache.Commitments); `by_name`: weights by name."""
    runner = type("RehearsalV2Runner", (RehearsalV2Runner,), {
        "rehearse_on_forward": staticmethod(on_forward or _no_report), "rehearse_kv": commitments,
        "WEIGHTS_BY_NAME": by_name,
        "__module__": MODULE, "__qualname__": "RehearsalV2Runner"})
    return type("RehearsalV2Worker", (RehearsalV2Worker,), {
        "rehearse_runner": runner, "rehearse_kv": commitments, "__module__": MODULE,
        "__qualname__": "RehearsalV2Worker"})

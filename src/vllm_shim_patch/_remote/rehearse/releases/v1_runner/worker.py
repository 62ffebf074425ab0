"""The stand-in worker: vLLM's GPU Worker with one override, init_device (imports vLLM: imported
only once the adapter fits).

The worker knows its rank and world from vLLM's own arguments (vLLM's
init_worker_distributed_environment over gloo), so it runs as one in-process worker or as one of
many worker processes alike.
"""

import os

import torch
from vllm.v1.worker import gpu_worker

from ...answer import CannotRehearse
from ..v1_engine import MODULE
from . import shims
from .runner import StandInModelRunner

QUALNAME = f"{MODULE}.RehearsalWorker"


class RehearsalWorker(gpu_worker.Worker):
    """vLLM's GPU Worker with ONE override: init_device. WHY: the real one asserts CUDA
    devices, calls torch.cuda.set_device, takes a CUDA memory snapshot and builds
    GPUModelRunner. Everything else (load_model, get_kv_cache_spec, initialize_from_config,
    compile_or_warm_up_model, execute_model, sample_tokens) is the installed Worker code."""

    # What the runner calls once per forward (a subclass for one run sets it: see `for_run`).
    rehearse_on_forward = None
    # The stand-in runner class it builds (a subclass for one run may name another: see `for_run`).
    rehearse_runner = StandInModelRunner

    def init_device(self):
        if getattr(self, "use_v2_model_runner", False):
            refuse_v2()
        self.device = torch.device("cpu")
        gpu_worker.init_worker_distributed_environment(
            self.vllm_config, self.rank, self.distributed_init_method, self.local_rank, "gloo")
        shims.set_random_seed(self.model_config.seed)
        # As the real init_device, before the runner (vLLM 0.13+): MoE's modular kernels take
        # their scratch from the workspace manager.
        if hasattr(gpu_worker, "init_workspace_manager"):
            gpu_worker.init_workspace_manager(self.device)
        self.model_runner = self.rehearse_runner(self.vllm_config, self.device, on_forward=self.rehearse_on_forward)


def for_run(on_forward, runner=StandInModelRunner):
    """The worker class of one run: RehearsalWorker whose runner (`runner`, a StandInModelRunner)
    reports each forward to `on_forward` (a callable of no arguments; None: reported nowhere)."""
    return type("RehearsalWorker", (RehearsalWorker,), {
        "rehearse_on_forward": staticmethod(on_forward) if on_forward is not None else None,
        "rehearse_runner": runner, "__module__": MODULE, "__qualname__": "RehearsalWorker"})


def refuse_v2_config(executor):
    """MultiprocExecutor start-up's check: a config that selected Model Runner V2 is refused
    before the real Worker.__init__ refuses it for want of Triton on CPU."""
    if getattr(executor.vllm_config, "use_v2_model_runner", False):
        refuse_v2()


def refuse_v2():
    # The real Worker would build Model Runner V2 (vLLM 0.25.1+ picks it by default): a
    # runner without the V1 runner's input_batch, which speculators' worker reads, and one
    # this rehearsal has no stand-in for.
    raise CannotRehearse(
        "vLLM selected Model Runner V2 for the generator (VLLM_USE_V2_MODEL_RUNNER is "
        f"{os.environ.get('VLLM_USE_V2_MODEL_RUNNER', 'unset')}): speculators' worker drives the V1 "
        "runner, and the rehearsal stands in for the V1 runner only")

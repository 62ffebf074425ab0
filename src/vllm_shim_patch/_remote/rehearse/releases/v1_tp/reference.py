"""The independent reference of a world of many ranks: the same model UNSHARDED, in the parent
(imports vLLM: imported only once the adapter fits).

A copy of the generator's config at tensor and pipeline parallel 1, vLLM's distributed state in
this process at world size 1 (gloo), the stand-in runner's load_model: vLLM's model class, every
parameter's whole tensor through the same loaders. Built after the workers were forked: a
parent whose torch.distributed is initialised at fork time would hand that state to them.
"""

import copy

import torch
from vllm.config import set_current_vllm_config
from vllm.distributed import parallel_state

from ..v1_engine import file_store


def build(runner_cls, generator_config):
    """The unsharded model's runner (its `model` and `_forward` give the reference states)."""
    config = copy.deepcopy(generator_config)
    pc = config.parallel_config
    pc.tensor_parallel_size = 1
    pc.pipeline_parallel_size = 1
    pc.world_size = 1
    pc.rank = 0
    # vLLM 0.33's initialize_model_parallel reads the current config (0.12 and 0.16 do not need it).
    with set_current_vllm_config(config):
        parallel_state.init_distributed_environment(
            world_size=1, rank=0, distributed_init_method=file_store(), local_rank=0,
            backend="gloo")
        parallel_state.ensure_model_parallel_initialized(1, 1)
    runner = runner_cls(config, torch.device("cpu"))
    runner.load_model()
    return runner


def teardown():
    """vLLM's distributed state of this process back to none."""
    parallel_state.destroy_model_parallel()
    parallel_state.destroy_distributed_environment()

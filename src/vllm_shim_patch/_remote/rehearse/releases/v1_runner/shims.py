"""What differs between the V1 releases the adapter fits, in one place: the arguments the
installed vLLM's classes take and the fields its outputs require (imports vLLM: imported only
once the adapter fits).

Shared by every part that builds vLLM's objects the way GPUModelRunner and its Worker do, in one
process or in many.
"""

import dataclasses
import inspect
import sys

from vllm.v1.outputs import ModelRunnerOutput
from vllm.v1.sample.logits_processor import build_logitsprocs
from vllm.v1.worker import gpu_worker
from vllm.v1.worker.gpu_input_batch import InputBatch
from vllm.v1.worker.gpu_model_runner import GPUModelRunner

try:
    from vllm.utils.torch_utils import set_random_seed
except ImportError:  # pragma: no cover - older layouts
    set_random_seed = getattr(gpu_worker, "set_random_seed", lambda seed: None)

# The installed runner splits a step into execute_model (returns None, keeps its state) and
# sample_tokens (vLLM 0.12 and later); before, execute_model returned the output.
TWO_PHASE = hasattr(GPUModelRunner, "sample_tokens")

# What GPUModelRunner passes for a generation run without logprobs, for the fields the
# installed ModelRunnerOutput requires (vLLM 0.12 has no defaults for them; 0.16 has).
_NO_LOGPROBS = {"logprobs": None, "prompt_logprobs_dict": {}, "pooler_output": []}
_REQUIRED = [f.name for f in dataclasses.fields(ModelRunnerOutput)
             if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]


def runner_output(**given):
    """A ModelRunnerOutput of the given fields, the required others as a run without logprobs."""
    return ModelRunnerOutput(**given, **{k: v for k, v in _NO_LOGPROBS.items()
                                         if k in _REQUIRED and k not in given})


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
    """The class GPUModelRunner.__init__ builds, from where the runner's module has it (its home
    moved between releases); before 0.25 _update_states does not ask for one."""
    cls = getattr(sys.modules[GPUModelRunner.__module__], "LateInteractionRunner", None)
    return None if cls is None else cls()

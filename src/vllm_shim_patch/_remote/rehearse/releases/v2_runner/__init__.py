"""What every adapter of vLLM's Model Runner V2 shares, in one process or in many: V2's real runner
and Triton kernels (interpreted) with only its CUDA parts stood in. No adapter itself (it is in no
ADAPTERS entry). This face imports no vLLM; the parts import it, one concern a module:

- `cuda`: the CUDA parts V2 reaches (UvaBuffer, streams and events, memory usage);
- `paged`: the CPU attention over V2's paged KV cache, block table and slot mapping;
- `kvcache`: the extensible KV cache's contract, enforced (no vLLM);
- `worker`: the GPU Worker with init_device and the extensible cache's commits stood in, V2's
  runner observed (each forward reported, the blocks it uses checked), the reference model holder;
- `checks`: the self-checks of the worker against vLLM's (no vLLM).

`environment()` says what must be set before vLLM is imported.
"""

import importlib.util
import os

# The V1 runner's module: where it imports, the Worker may build it (VLLM_USE_V2_MODEL_RUNNER),
# and the V1 adapters answer for that vLLM.
V1_RUNNER = "vllm.v1.worker.gpu_model_runner"
RUNNER = "Model Runner V2"


def v1_beside():
    """Why a V2 adapter does not fit where V1's runner is there too, or None."""
    if importlib.util.find_spec(V1_RUNNER) is not None:
        return f"{V1_RUNNER} imports: Model Runner V1 is there beside V2 (the V1 adapters rehearse it)"
    return None


def environment():
    """TRITON_INTERPRET and CUDA_VISIBLE_DEVICES where the installed vLLM's files hold V2's runner and
    not V1's: read from the files (vLLM is not imported yet: vllm.triton_utils reads the variables
    once, at import)."""
    spec = importlib.util.find_spec("vllm")
    roots = list(spec.submodule_search_locations or ()) if spec is not None else []
    worker = [os.path.join(root, "v1", "worker") for root in roots]
    v2 = any(os.path.isfile(os.path.join(w, "gpu", "model_runner.py")) for w in worker)
    v1 = any(os.path.isfile(os.path.join(w, "gpu_model_runner.py")) for w in worker)
    return {"TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""} if v2 and not v1 else {}

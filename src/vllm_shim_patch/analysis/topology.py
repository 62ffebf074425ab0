"""The topology the rehearsal runs: how many tensor parallel ranks (one worker process each) and
pipeline stages, chosen before anything is written.

Given (`--tensor-parallel-size`), it is checked against this machine's memory (one worker process
a rank; a machine with fewer CPUs than ranks runs them all, slower); not given, it is what the
user's model needs where `--model` says (its weights against one GPU), capped only by that
memory, with the reason in the verdict; else 1. A size that
cannot run is refused with one line (exit 2), never oversubscribed or skipped silently.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from ..errors import UsageError
from .handoff import Topology  # its `reason`: why this size, where the user did not give it (None: given, or 1)

# What one GPU holds, for "what the model needs" (an 80 GB GPU at vLLM's default 0.9 utilisation).
GPU_BYTES = 80e9 * 0.9
GPU_WORDS = "80 GB GPUs"
# The most ranks one node has (beyond it a model spans nodes: still "8" here, the rank logic is the same).
NODE_GPUS = 8
GiB = 1024**3
# What one rank's worker process needs: measured on vLLM 0.16.0, Kimi-K2.5's preset at tensor parallel
# size 8, the parity workload (the ranks forked from the rehearsal's process): the machine's memory in
# use rose by 2.2 GB at most, the rehearsal's own process counted in, about MEASURED a rank; twice
# that, for a larger model or another release.
MEASURED = 0.27 * GiB
RANK_BYTES = 2 * MEASURED
# Beyond any node (NODE_GPUS) a model spans nodes; the rehearsal's ranks stay on this machine.
MOST_RANKS = 64
GENERATOR = "speculators/data_generation/vllm_hidden_states_generator.py"


def available_memory() -> float | None:
    """The memory this machine has available now, in bytes (MemAvailable), or None where the
    system does not say."""
    try:
        for line in Path("/proc/meminfo").read_text(encoding="ascii").splitlines():
            if line.startswith("MemAvailable:"):
                return float(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def choose(tensor_parallel: int | None, pipeline_parallel: int | None, model: dict[str, Any],
           site: Path | None, speculators: str, memory: float | None = None) -> Topology:
    """The topology to rehearse: `model` is `rehearse.model_request`'s answer; `site` the folder
    the installed speculators is in (its generator says whether it takes a pipeline size);
    `memory` what this machine has available (bytes; None: not known, nothing refused for it).
    The tiny model is widened for the ranks (`families.common.for_ranks`) and the worker
    processes share the CPUs however few, so memory is the one limit."""
    memory = available_memory() if memory is None else memory
    most = _largest(memory)
    if pipeline_parallel is not None and pipeline_parallel > 1:
        raise UsageError(_no_pipeline(pipeline_parallel, site, speculators))
    if tensor_parallel is not None:
        if tensor_parallel > most:
            raise UsageError(f"--tensor-parallel-size {tensor_parallel}: the rehearsal runs one worker process per "
                             f"rank, each needing about {RANK_BYTES / GiB:g} GiB of memory, and this machine has "
                             f"{_gib(memory)} GiB available (at most --tensor-parallel-size {most})")
        return Topology(tensor_parallel)
    if not model.get("model"):
        return Topology()
    weights = model_bytes(Path(model["model"]))
    if weights is None:
        return Topology()
    needed = needed_size(weights)
    if needed == 1:
        return Topology()
    size = min(needed, _power_of_two(most))
    how = (f"your model's weights, about {weights / 1e9:,.0f} GB, need tensor parallel size "
           f"{needed if needed < NODE_GPUS else f'{NODE_GPUS} or more'} on {GPU_WORDS}")
    if size == needed:
        return Topology(size, reason=how)
    if size == 1:
        return Topology(1, reason=f"{how}; this machine's {_gib(memory)} GiB of available memory runs one worker "
                                  "process: rehearsed at 1, where no rank logic is tested")
    return Topology(size, reason=f"{how}; this machine's {_gib(memory)} GiB of available memory runs {size}")


def _gib(memory: float | None) -> str:
    return f"{(memory or 0) / GiB:.1f}"


def _power_of_two(n: int) -> int:
    """The largest power of two up to `n` (the sizes a model's GPUs come in)."""
    return 1 << (n.bit_length() - 1)


def _largest(memory: float | None) -> int:
    """The most worker processes `memory` holds (no limit where it is not known)."""
    if memory is None:
        return MOST_RANKS
    return max(1, min(MOST_RANKS, int(memory // RANK_BYTES)))


def needed_size(weights: float) -> int:
    """The smallest power of two of GPUs whose memory holds `weights` bytes (at most NODE_GPUS)."""
    n = 1
    while weights / n > GPU_BYTES and n < NODE_GPUS:
        n *= 2
    return n


def _no_pipeline(size: int, site: Path | None, speculators: str) -> str:
    head = f"--pipeline-parallel-size {size}"
    if not _takes_pipeline(site):
        return (f"{head}: speculators {speculators}'s VllmHiddenStatesGenerator takes no pipeline_parallel_size "
                "(its executor runs tensor parallel ranks only): rehearse with --tensor-parallel-size")
    return (f"{head}: the rehearsal's stand-in model runner runs no pipeline stages (vLLM's runner would hand "
            "IntermediateTensors from stage to stage): rehearse with --tensor-parallel-size")


def _takes_pipeline(site: Path | None) -> bool:
    """Whether the installed generator's __init__ has a pipeline_parallel_size parameter (read
    with ast: importing it would import vLLM)."""
    if site is None:
        return False
    try:
        tree = ast.parse((site / GENERATOR).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "VllmHiddenStatesGenerator":
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                    args = item.args
                    return any(a.arg == "pipeline_parallel_size" for a in [*args.args, *args.kwonlyargs])
    return False


def model_bytes(path: Path) -> float | None:
    """The model's weights in bytes: a checkpoint's index says (`metadata.total_size`); else an
    estimate from its config (parameters by architecture, times the bytes of its dtype)."""
    from ..errors import UsageError
    from .modelconfig import read_config, read_index

    folder = path if path.is_dir() else path.parent
    index = read_index(folder)
    metadata = index.get("metadata") if isinstance(index, dict) else None
    total = metadata.get("total_size") if isinstance(metadata, dict) else None
    if isinstance(total, (int, float)) and not isinstance(total, bool) and total > 0:
        return float(total)
    try:
        _, _, config = read_config(str(path))
    except UsageError:
        return None
    return estimate_bytes(config) if isinstance(config, dict) else None


_DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float8_e4m3fn": 1}


def estimate_bytes(config: dict[str, Any]) -> float | None:
    """Parameters estimated from the (text) config's sizes: attention, dense or expert MLPs per
    layer, embeddings; times the bytes per parameter its dtype or quantization says."""
    inner = config.get("text_config")
    text: dict[str, Any] = inner if isinstance(inner, dict) else config
    try:
        return _parameters(text) * _bytes_per_parameter(config, text)
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None  # a config whose sizes are missing or not numbers: no estimate, size 1


def _parameters(text: dict[str, Any]) -> int:
    h, layers, vocab = int(text["hidden_size"]), int(text["num_hidden_layers"]), int(text["vocab_size"])
    heads = int(text["num_attention_heads"])
    kv = int(text.get("num_key_value_heads") or heads)
    mla_head = int(text.get("qk_nope_head_dim") or 0) + int(text.get("qk_rope_head_dim") or 0)
    head_dim = int(text.get("head_dim") or mla_head or h // heads)
    attention = 2 * h * heads * head_dim + 2 * h * kv * head_dim
    dense = 3 * h * int(text.get("intermediate_size") or 4 * h)
    experts = int(text.get("n_routed_experts") or text.get("num_experts") or text.get("num_local_experts") or 0)
    expert = 3 * h * int(text.get("moe_intermediate_size") or text.get("intermediate_size") or 4 * h)
    moe = (experts + int(text.get("n_shared_experts") or 0)) * expert
    dense_layers = int(text.get("first_k_dense_replace") or 0) if experts else layers
    params = layers * attention + dense_layers * dense + (layers - dense_layers) * moe
    params += vocab * h * (1 if text.get("tie_word_embeddings") else 2)
    return params


def _bytes_per_parameter(config: dict[str, Any], text: dict[str, Any]) -> float:
    quant = config.get("quantization_config") or text.get("quantization_config")
    if isinstance(quant, dict):
        method = str(quant.get("quant_method") or "").lower()
        bits = quant.get("bits") or quant.get("num_bits")
        if method in ("fp8", "fbgemm_fp8") or bits == 8:
            return 1.0
        if method in ("mxfp4", "awq", "gptq") or bits == 4:
            return 0.5
    dtype = str(text.get("torch_dtype") or text.get("dtype") or config.get("torch_dtype") or "bfloat16")
    return float(_DTYPE_BYTES.get(dtype.replace("torch.", ""), 2))

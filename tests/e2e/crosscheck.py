"""Run inside the target: the rehearsal builds its tiny model of an --arch preset, then, instead of
speculators' workload, transformers' own implementation of the architecture gets wide random
weights, vLLM's model gets the same ones through vLLM's own loader, and one prompt's residual
stream after the captured layers is compared. What the stand-ins replace (the attention backend,
MLA's forward_impl, the MoE path) must compute what the architecture's reference code computes.

Usage: python crosscheck.py REHEARSE_PACKAGE_DIR ARCH  -> one JSON line on stdout.
"""
import importlib.util
import json
import os
import random
import sys

remote = sys.argv[1]
spec = importlib.util.spec_from_file_location('_vsp_remote_rehearse', os.path.join(remote, '__init__.py'),
                                              submodule_search_locations=[remote])
rehearse = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = rehearse
spec.loader.exec_module(rehearse)
run_mod = sys.modules['_vsp_remote_rehearse.run']
common = sys.modules['_vsp_remote_rehearse.families.common']
moe = sys.modules['_vsp_remote_rehearse.families.moe']
check = sys.modules['_vsp_remote_rehearse.check']
# Attention in blocks of a few query rows (the rehearsal's own budget would take the 300-token
# prompt whole): the blocked arithmetic is what transformers is compared with.
sys.modules['_vsp_remote_rehearse.attention'].SCORES_BYTES = 64 << 10


FOUND = {}  # what the crosscheck measured, beside the rehearsal's answer


def crosscheck(run, work, family, adapter, S, config):
    """transformers' own implementation of the architecture, the same weights loaded into vLLM's
    model by vLLM's own loader: the stand-in attention / MoE / MLA must give the same states."""
    import torch
    import transformers

    model = adapter.model_of(S)
    base = sys.modules["_vsp_remote_rehearse.families"].base_model(family, model)
    folder = os.path.join(run.tmpdir, "model")
    hf_config = transformers.AutoConfig.from_pretrained(folder, trust_remote_code=True)
    text = getattr(hf_config, "text_config", hf_config)
    text._attn_implementation = "eager"
    try:
        hf = transformers.AutoModelForCausalLM.from_config(text, torch_dtype=torch.float32)
        prefix = ""
    except ValueError:  # a wrapper's text model has no causal-LM class of its own (Qwen3-VL)
        hf = transformers.AutoModel.from_config(text, torch_dtype=torch.float32)
        prefix = "model."
    gen = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if "norm" in name.rsplit(".", 2)[-2]:
                p.copy_(torch.rand(p.shape, generator=gen) * 0.4 + 0.8)
            else:
                p.copy_(torch.rand(p.shape, generator=gen) * 0.6 - 0.3)
    target = model.get_language_model() if hasattr(model, "get_language_model") else model
    # vLLM runs a float32 config in bfloat16 ("auto"); compare both in float32, where the two
    # implementations agree to rounding.
    model.to(torch.float32)
    for m in model.modules():  # the rotary tables were made in bfloat16: make them again
        if hasattr(m, "_compute_cos_sin_cache") and hasattr(m, "cos_sin_cache"):
            m.cos_sin_cache = m._compute_cos_sin_cache().to(torch.float32)
    loaded = target.load_weights((prefix + k, v) for k, v in hf.state_dict().items())
    moe.after_weights(model, adapter.worker_of(S).model_runner.vllm_config)
    rng = random.Random(3)
    prompt = [rng.randrange(3, text.vocab_size) for _ in range(300)]
    ours = common.reference_states(model, base, prompt, work.layers, adapter.forward_of(S))
    with torch.inference_mode():
        out = hf(torch.tensor([prompt]), output_hidden_states=True)
    theirs = {i: out.hidden_states[i + 1][0].float() for i in work.layers}
    FOUND["crosscheck"] = {str(i): check.relative(ours[i], theirs[i]) for i in work.layers}
    FOUND["loaded"] = len(loaded) if loaded is not None else None


run_mod._drive = crosscheck
req = rehearse.request({"arch": sys.argv[2], "layers": [1, 2], "batches": [[37, 21]],
                        "supported": ["0.3.0", "0.4.0", "0.4.0.1"]})
rehearse.prepare(req)
ans = {**rehearse.rehearse(req).to_json(), **FOUND}
# Straight to the file descriptor: vLLM's worker set-up prefixes this process's sys.stdout lines.
os.write(1, (json.dumps({k: ans.get(k) for k in ("outcome", "failure", "crosscheck", "loaded", "architecture")},
                        default=str) + "\n").encode())

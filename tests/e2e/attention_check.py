"""Run by the real vLLM venv's interpreter (torch): the rehearsal's stand-in attention against
torch's own scaled_dot_product_attention in float64 (sinks and soft cap, which it has not, by
their definition), whole prompts and the same prompts in chunks. Prints one JSON line."""

import importlib.util
import json
import sys

import torch

spec = importlib.util.spec_from_file_location("standin_attention", sys.argv[1])
A = importlib.util.module_from_spec(spec)
spec.loader.exec_module(A)

HEADS, KV_HEADS, SIZE, SCALE, N = 4, 2, 16, 0.25, 700


def stand_in(impl, q, k, v, start):
    """The stand-in's rows `start`... (keys and values from 0), block by block as its forward runs them."""
    out = torch.empty(q.shape[0], HEADS, SIZE)
    end = start + q.shape[0]
    impl.attend_rows(q, k[:end], v[:end], start, out)
    return out


def reference(kw, q, k, v):
    """torch's attention in float64 over the whole prompt: causal, a window, a soft cap, sinks."""
    qd, kd, vd = q.double().transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1)
    pos = torch.arange(N)
    allowed = pos.unsqueeze(0) <= pos.unsqueeze(1)
    if "sliding_window" in kw:
        allowed &= pos.unsqueeze(0) > pos.unsqueeze(1) - kw["sliding_window"]
    if "logits_soft_cap" not in kw and "sinks" not in kw:
        out = torch.nn.functional.scaled_dot_product_attention(qd, kd, vd, attn_mask=allowed, scale=SCALE)
        return out.transpose(0, 1).float()
    scores = qd @ kd.transpose(1, 2) * SCALE
    if "logits_soft_cap" in kw:
        scores = kw["logits_soft_cap"] * torch.tanh(scores / kw["logits_soft_cap"])
    scores = scores.masked_fill(~allowed, float("-inf"))
    if "sinks" in kw:
        sink = kw["sinks"].double().view(-1, 1, 1).expand(-1, N, 1)
        probs = torch.softmax(torch.cat([scores, sink], dim=-1), dim=-1)[..., :-1]
    else:
        probs = torch.softmax(scores, dim=-1)
    return (probs @ vd).transpose(0, 1).float()


torch.manual_seed(0)
q = torch.randn(N, HEADS, SIZE) * 3
k = (torch.randn(N, KV_HEADS, SIZE) * 3).double().repeat_interleave(HEADS // KV_HEADS, dim=1)
v = torch.randn(N, KV_HEADS, SIZE).double().repeat_interleave(HEADS // KV_HEADS, dim=1)
answer = {}
for name, kw in (("causal", {}), ("window", {"sliding_window": 128}), ("soft-cap", {"logits_soft_cap": 5.0}),
                 ("sinks", {"sinks": torch.randn(HEADS)})):
    impl = A.StandInAttentionImpl(HEADS, SIZE, SCALE, num_kv_heads=KV_HEADS, **kw)
    whole = stand_in(impl, q, k, v, 0)
    chunks = torch.cat([stand_in(impl, q[a:b], k, v, a) for a, b in ((0, 300), (300, 301), (301, 650), (650, N))])
    answer[name] = {"vs_torch": (whole - reference(kw, q, k, v)).abs().max().item(),
                    "chunks_equal_whole": torch.equal(chunks, whole)}
print(json.dumps(answer))

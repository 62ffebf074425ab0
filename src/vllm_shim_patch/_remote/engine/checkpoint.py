"""The engine's model: a tiny Llama in bfloat16, and transformers' forward of one prompt alone.

bfloat16 because vLLM's CPU platform runs a checkpoint's dtype "auto" in bfloat16 anyway (a float32
checkpoint too): the reference runs the same bfloat16 weights in float32 arithmetic.
"""

from __future__ import annotations

from typing import Any

HIDDEN, LAYERS, HEADS, KV_HEADS, HEAD_DIM, VOCAB = 128, 4, 4, 2, 32, 1024
SEED = 1234
ARCHITECTURE = "LlamaForCausalLM"
DESCRIPTION = (f"a tiny bfloat16 {ARCHITECTURE} ({LAYERS} layers, hidden {HIDDEN}, {HEADS} heads, "
               f"vocab {VOCAB}), weights of std 0.1 so attention is not uniform, and a word-level tokenizer")


def write(folder: str) -> Any:
    """Write the checkpoint and its tokenizer into `folder`; the model, in float32, for the reference."""
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


def reference(model: Any, prompt: list[int], layers: tuple[int, ...]) -> dict[int, Any]:
    """Transformers' forward of one prompt alone: the residual stream after each decoder layer
    (every layer, not only `layers`: a capture of the wrong layer is told by them)."""
    import torch

    with torch.no_grad():
        out = model(torch.tensor([prompt]), output_hidden_states=True)
    return {lid: out.hidden_states[lid + 1][0] for lid in range(len(out.hidden_states) - 1)}

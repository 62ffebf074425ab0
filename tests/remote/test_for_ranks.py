"""The tiny model widened for tensor parallel ranks (`families.common.for_ranks`): every size vLLM
splits across ranks becomes a whole share for each, the architecture is kept (grouped KV heads stay
grouped, MLA's KV heads follow its query heads), and a size that already fits is left alone. What
vLLM itself does with them at size 8 is tests/e2e/test_topology_realvllm.py's."""

from __future__ import annotations

import pytest

from vllm_shim_patch._remote.rehearse import families
from vllm_shim_patch._remote.rehearse.families import common


def _tiny(name: str) -> dict:
    family, config = families.preset(name)
    return family.shrink(config, 2048, vocab=common.VOCAB)


def test_at_sizes_the_tiny_model_already_shares_nothing_changes() -> None:
    for name in families.presets():
        tiny = _tiny(name)
        for ranks in (1, 2, 4):
            assert common.for_ranks(tiny, ranks) == tiny, (name, ranks)


def test_kimi_k25_at_8_ranks_keeps_8_heads_and_its_shares() -> None:
    wide = common.for_ranks(_tiny("kimi-k2.5"), 8)
    text, vision = wide["text_config"], wide["vision_config"]
    assert (text["num_attention_heads"], text["num_key_value_heads"]) == (8, 8)  # MLA: KV heads follow
    assert (text["intermediate_size"], text["moe_intermediate_size"], text["n_routed_experts"]) == (128, 32, 8)
    assert (vision["num_attention_heads"], vision["intermediate_size"]) == (8, 128)
    # What is not split stays: the hidden size, MLA's latent ranks, the vocabulary.
    assert (text["hidden_size"], text["kv_lora_rank"], text["q_lora_rank"], text["vocab_size"]) == (64, 32, 32, 128)


@pytest.mark.parametrize(("ranks", "heads", "kv", "intermediate"), [
    (8, 8, 2, 128),   # 2 grouped KV heads, each replicated on 4 of the 8 ranks (as vLLM does)
    (16, 16, 2, 128),
    (3, 12, 6, 384),  # neither divides: each the least multiple of 3 (still 2 query heads a KV head)
])
def test_grouped_attention_stays_grouped(ranks: int, heads: int, kv: int, intermediate: int) -> None:
    wide = common.for_ranks(_tiny("llama"), ranks)
    assert (wide["num_attention_heads"], wide["num_key_value_heads"], wide["intermediate_size"]) == (
        heads, kv, intermediate)
    assert wide["num_attention_heads"] % ranks == 0 and wide["intermediate_size"] % ranks == 0
    assert ranks % wide["num_key_value_heads"] == 0 or wide["num_key_value_heads"] % ranks == 0


def test_a_vision_tower_that_says_num_heads_is_widened_too() -> None:
    tiny = _tiny("qwen3-vl")
    wide = common.for_ranks(tiny, 8)
    assert wide["vision_config"]["num_heads"] % 8 == 0 and wide["text_config"]["num_attention_heads"] % 8 == 0
    assert common.for_ranks(tiny, 8) == wide and tiny != wide  # a copy: the shrunk config is kept as it was

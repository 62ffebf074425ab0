"""The transformers rules on the real speculators and the real transformers.

eagle-attention-mask-fallback defines `_prepare_4d_causal_attention_mask` where transformers 5.24
has none: the definition the rule writes into the real speculators 0.3.0 `eagle.py` is compared,
in the reference venv (transformers 4.57.6, torch), with transformers' own function over the
masks speculators passes (2-D padding, causal, with and without a sliding window and a past).
"""

from __future__ import annotations

import ast
import json
import subprocess
import zipfile
from pathlib import Path

import pytest
import realdata
from packaging.version import Version

from vllm_shim_patch.rewrite.engine import Engine
from vllm_shim_patch.rules.loader import load_pack

EAGLE = "speculators/models/eagle.py"

COMPARE = r'''
import json, sys, torch
from transformers.modeling_attn_mask_utils import _prepare_4d_causal_attention_mask as real
namespace = {"torch": torch}
exec(sys.stdin.read(), namespace)
ours = namespace["_prepare_4d_causal_attention_mask"]
gen = torch.Generator().manual_seed(0)
cases, worst = 0, []
for bsz, q, past, window, dtype in [(1, 1, 0, None, torch.float32), (2, 7, 0, None, torch.float32),
                                    (3, 5, 4, None, torch.bfloat16), (2, 9, 0, 3, torch.float32),
                                    (2, 6, 5, 4, torch.float16), (1, 1, 3, 2, torch.float32)]:
    mask = (torch.rand(bsz, q + past, generator=gen) > 0.3).long()
    embeds = torch.zeros(bsz, q, 8, dtype=dtype)
    a = real(mask, (bsz, q), embeds, past, sliding_window=window)
    b = ours(mask, (bsz, q), embeds, past, sliding_window=window)
    cases += 1
    if a.shape != b.shape or a.dtype != b.dtype or not torch.equal(a, b):
        worst.append([bsz, q, past, window, str(dtype)])
print(json.dumps({"cases": cases, "different": worst}))
'''


def _fallback_source() -> str:
    with zipfile.ZipFile(realdata.speculators_wheel(realdata.OLD_SPECULATORS)) as zf:
        source = zf.read(EAGLE)
    [rule] = [r for r in load_pack().rules if r.id == "eagle-attention-mask-fallback"]
    result = Engine([rule], version=Version("0.33"), facts={"transformers>=5.24": True}).transform(source, EAGLE)
    assert [(s.action, s.message) for s in result.sites] == [
        ("edited", "define _prepare_4d_causal_attention_mask where transformers has none")]
    tree = ast.parse(result.after)
    [fallback] = [node for stmt in tree.body if isinstance(stmt, ast.Try)
                  for handler in stmt.handlers for node in handler.body if isinstance(node, ast.FunctionDef)]
    return ast.unparse(fallback)


@pytest.mark.realvllm
@pytest.mark.slow
def test_the_fallback_computes_what_transformers_4_computes(vllm_venv_python: Path) -> None:
    proc = subprocess.run([str(vllm_venv_python), "-c", COMPARE], input=_fallback_source(),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"cases": 6, "different": []}

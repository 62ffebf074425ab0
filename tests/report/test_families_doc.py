"""The README's family table is the rehearsal's one family table, generated (report/families.py)."""

from __future__ import annotations

from pathlib import Path

from vllm_shim_patch.report.families import table

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_family_table_is_current() -> None:
    block = README.read_text().split("<!-- families:start -->\n", 1)[1].split("<!-- families:end -->", 1)[0]
    assert block == table(), "run: python -m vllm_shim_patch.report.families (and paste it between the markers)"


def test_each_family_is_one_row_naming_its_presets() -> None:
    from vllm_shim_patch._remote.rehearse import families

    rows = table().splitlines()[2:]
    assert [r.split(" | ")[0] for r in rows] == [
        "| " + ", ".join(f"`{n}`" for n in (f.NAME, *f.PRESETS)) + (" (default)" if f.NAME == families.DEFAULT else "")
        for f in families.FAMILIES.values()]
    assert rows[0] == ("| `llama` (default) | LlamaForCausalLM, MistralForCausalLM | Llama-3.1-8B's config: GQA, "
                       "llama3 rope scaling |")
    assert rows[3].startswith("| `deepseek`, `mistral-large-3` | DeepseekV3ForCausalLM, DeepseekV2ForCausalLM, ")

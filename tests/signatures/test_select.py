"""select.py: the guard's static source is cached under the tool's cache dir, never the target."""

from __future__ import annotations

from pathlib import Path

import pytest
from sigcases import TREE

from vllm_shim_patch.signatures.select import guard_source


class _Target:
    def __init__(self, vllm_location: Path | None):
        self.vllm_location = vllm_location


def test_guard_source_caches_under_the_tool_cache_dir(monkeypatch: pytest.MonkeyPatch,
                                                      tmp_path: Path) -> None:
    monkeypatch.setenv("VSP_CACHE_DIR", str(tmp_path / "cache"))
    before = sorted(p.relative_to(TREE) for p in TREE.rglob("*"))
    src = guard_source(_Target(None), str(TREE))
    assert src.get_many(["vllm.funcs.plain"])["vllm.funcs.plain"] is not None
    files = list((tmp_path / "cache" / "signatures").iterdir())
    assert len(files) == 1 and files[0].suffix == ".json"
    # The installed vLLM's location is keyed the same way; a second reader reads no source.
    again = guard_source(_Target(TREE), None)
    assert again.get("vllm.funcs.plain") is not None and again.parsed_modules == []
    assert list((tmp_path / "cache" / "signatures").iterdir()) == files
    assert sorted(p.relative_to(TREE) for p in TREE.rglob("*") if "__pycache__" not in p.parts) == [
        p for p in before if "__pycache__" not in p.parts
    ]
    assert guard_source(_Target(None), None) is None
    explicit = guard_source(_Target(TREE), None, cache_dir=tmp_path / "elsewhere")
    explicit.get("vllm.funcs.plain")
    assert len(list((tmp_path / "elsewhere" / "signatures").iterdir())) == 1

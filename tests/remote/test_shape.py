"""The rehearsal package stays a package of small parts: no module over 300 lines, no function
over 80 (issue 25). A part that grows past either is split by concern, not allowed here."""

from __future__ import annotations

import ast
from pathlib import Path

import vllm_shim_patch

REHEARSE = Path(vllm_shim_patch.__file__).parent / "_remote" / "rehearse"
MODULE_LINES = 300
FUNCTION_LINES = 80


def test_no_module_of_the_rehearsal_is_over_300_lines() -> None:
    sizes = {p.relative_to(REHEARSE).as_posix(): len(p.read_text().splitlines()) for p in REHEARSE.rglob("*.py")}
    assert len(sizes) >= 30
    assert {name: n for name, n in sizes.items() if n > MODULE_LINES} == {}


def test_no_function_of_the_rehearsal_is_over_80_lines() -> None:
    long = {}
    for path in REHEARSE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > FUNCTION_LINES:
                    long[f"{path.relative_to(REHEARSE).as_posix()}:{node.lineno} {node.name}"] = n
    assert long == {}

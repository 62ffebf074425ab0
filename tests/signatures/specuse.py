"""The vLLM callables the real speculators wheels use, and their call sites, read from the wheels
with `ast` (shared by the release matrix and the live comparison)."""

from __future__ import annotations

import ast
import zipfile
from dataclasses import dataclass
from pathlib import Path

# Attributes speculators sets to a vLLM object in __init__ and calls methods on later.
_INSTANCE_ATTRS = {
    "scheduler": "vllm.v1.core.sched.scheduler.Scheduler",
    "executor": "vllm.v1.executor.multiproc_executor.MultiprocExecutor",
}


@dataclass(frozen=True)
class Site:
    callee: str  # qualified name; a method as Class.method
    path: str  # inside the wheel
    line: int
    n_positional: int
    keywords: tuple[str, ...]
    star_args: bool
    star_kwargs: bool


def imported_names(wheel: Path) -> dict[str, str]:
    """Local name → vLLM qualified name, over every module of the wheel that imports from vLLM."""
    out: dict[str, str] = {}
    for _, tree in _modules(wheel):
        out.update(_imports(tree))
    return out


def call_sites(wheel: Path) -> list[Site]:
    """Calls of names imported from vLLM, and of methods on `self.scheduler`/`self.executor`."""
    sites = []
    for path, tree in _modules(wheel):
        names = _imports(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            callee = None
            if isinstance(node.func, ast.Name) and node.func.id in names:
                callee = names[node.func.id]
            elif (
                isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Attribute)
                and isinstance(node.func.value.value, ast.Name)
                and node.func.value.value.id == "self"
                and node.func.value.attr in _INSTANCE_ATTRS
            ):
                callee = f"{_INSTANCE_ATTRS[node.func.value.attr]}.{node.func.attr}"
            if callee is None:
                continue
            sites.append(
                Site(
                    callee, path, node.lineno,
                    sum(not isinstance(a, ast.Starred) for a in node.args),
                    tuple(kw.arg for kw in node.keywords if kw.arg is not None),
                    any(isinstance(a, ast.Starred) for a in node.args),
                    any(kw.arg is None for kw in node.keywords),
                )
            )
    return sites


def _modules(wheel: Path) -> list[tuple[str, ast.Module]]:
    out = []
    with zipfile.ZipFile(wheel) as zf:
        for name in sorted(zf.namelist()):
            if name.endswith(".py"):
                source = zf.read(name)
                if b"vllm" in source:
                    out.append((name, ast.parse(source, filename=name)))
    return out


def _imports(tree: ast.Module) -> dict[str, str]:
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and (
            node.module == "vllm" or node.module.startswith("vllm.")
        ):
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names

"""Where a name is defined now: every top-level `def`/`class` of that name in the vLLM tree, for
an audit that finds an import broken (`get_kv_cache_config_from_groups` moved from
`kv_cache_utils` to `kv_cache_planning` in vLLM 0.33).

A byte search picks the few files that could hold the definition; only those are parsed. The
answer is not kept in the signature cache: it depends on every file of the tree, and the stat of
all of them would cost about as much as the search (0.3 s over vLLM 0.16's 1,400 files, 0.9 s
over 0.33's 3,200 on a loaded 2-core machine; one pass serves any number of names).
"""

from __future__ import annotations

import ast
import os
import re
import zipfile
from pathlib import Path

__all__ = ["assigned_anywhere", "locate"]


def locate(root: Path, names: list[str], package: str = "vllm") -> dict[str, list[str]]:
    """For each name, the qualified names of its top-level definitions under `root/package`,
    public modules first (no `_`-prefixed part), then by module name. One pass for all names."""
    wanted = sorted({n for n in names if n.isidentifier()})
    found: dict[str, list[str]] = {n: [] for n in names}
    if not wanted:
        return found
    alternatives = b"|".join(re.escape(n.encode()) for n in wanted)
    pattern = re.compile(rb"^(?:async\s+def|def|class)\s+(" + alternatives + rb")\b", re.MULTILINE)
    for rel, source in _sources(root, package):
        hits = {m.group(1).decode() for m in pattern.finditer(source)}
        if not hits:
            continue
        try:
            tree = ast.parse(source)
        except (SyntaxError, ValueError):
            continue
        module = rel[: -len(".py")].replace("/", ".").removesuffix(".__init__")
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and (
                node.name in hits and f"{module}.{node.name}" not in found[node.name]
            ):
                found[node.name].append(f"{module}.{node.name}")
    return {
        n: sorted(q, key=lambda q: (any(p.startswith("_") for p in q.split(".")[:-1]), q))
        for n, q in found.items()
    }


def assigned_anywhere(root: Path, attr: str, package: str = "vllm") -> str | None:
    """`path:line` of the first `<something>.attr = ...` or `setattr(..., "attr", ...)` in the
    tree, else None: an attribute a class does not define may still be set on its instances from
    outside it, so "no such attribute" needs this search to come up empty."""
    if not attr.isidentifier():
        return None
    name = re.escape(attr.encode())
    pattern = re.compile(
        rb"\.\s*" + name + rb"\s*(?::[^=\n]*)?=(?!=)|setattr\([^,\n]*,\s*[\"']" + name + rb"[\"']"
    )
    for rel, source in _sources(root, package):
        found = pattern.search(source)
        if found:
            line = source.count(b"\n", 0, found.start()) + 1
            return f"{rel}:{line}"
    return None


def _sources(root: Path, package: str):  # type: ignore[no-untyped-def]
    if root.is_file():
        with zipfile.ZipFile(root) as zf:
            for rel in zf.namelist():
                if rel.startswith(f"{package}/") and rel.endswith(".py"):
                    yield rel, zf.read(rel)
        return
    base = root / package
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for filename in sorted(filenames):
            if filename.endswith(".py"):
                path = Path(dirpath) / filename
                try:
                    yield path.relative_to(root).as_posix(), path.read_bytes()
                except OSError:
                    continue

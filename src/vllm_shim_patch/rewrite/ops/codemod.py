"""`codemod: NAME`: Python in `codemods/NAME.py` for what YAML cannot say.

For a `call:` rule the module defines ``rewrite(call, site)``, the shape of every YAML
operation's rewrite (`rewrite.context`). For an `in:` rule it defines ``class
Codemod(ScopedTransform)`` (`rewrite.scoped`), which transforms the region. A codemod that cannot
be loaded fails the whole run before anything is read or written, naming the codemod, the rule
and the file; one that raises, or runs past its time limit, on a file fails that file, and
apply then writes nothing.
"""

from __future__ import annotations

import contextlib
import importlib.util
import sys
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...errors import CodemodError
from .base import NodeReader, Fields, Operation, is_identifier

if TYPE_CHECKING:
    from ..rule import OldSignature, Rule
    from ..context import Rewrite


def bundled_codemod_dir() -> Path:
    """The codemods shipped inside the wheel (top-level `codemods/` in the source tree)."""
    return Path(str(resources.files("vllm_shim_patch.codemods")))


def parse(r: NodeReader, fields: Fields, parsed: dict[str, Any], signature: OldSignature | None) -> str:
    node = fields["codemod"][1]
    name = r.scalar(node, "'codemod'")
    if not is_identifier(name):
        raise r.fail(node, f"'codemod' {name!r} is not a module name")
    rule_dir = Path(r.path).parent
    for cand in (rule_dir / "codemods" / f"{name}.py", rule_dir.parent / "codemods" / f"{name}.py",
                 bundled_codemod_dir() / f"{name}.py"):
        if cand.is_file():
            return str(cand)
    raise r.fail(node, f"codemod {name!r} not found (looked in codemods/ beside the rule file and the bundled codemods)")


# Loaded codemods by (file, rule): apply loads them before its first write, the engine again after.
_LOADED: dict[tuple[str, str, str], Rewrite] = {}


def load(path: str, rule: Rule) -> Rewrite:
    """Import the codemod once per rule; any failure (a raise, an exit, no `rewrite`) is a CodemodError."""
    key = (path, rule.path, rule.id)
    if key not in _LOADED:
        _LOADED[key] = _load(path, rule)
    return _LOADED[key]


def _load(path: str, rule: Rule) -> Rewrite:
    name = Path(path).stem
    where = f"codemod {name!r} ({path})"
    spec = importlib.util.spec_from_file_location(f"vsp_codemod_{rule.id.replace('-', '_')}", path)
    if spec is None or spec.loader is None:
        raise CodemodError(rule.path, rule.line, rule.id, f"cannot load {where}")
    module = importlib.util.module_from_spec(spec)
    try:
        with contextlib.redirect_stdout(sys.stderr):  # stdout is the diff or the JSON a script reads
            spec.loader.exec_module(module)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # SystemExit too: a codemod must not end the run, let alone with 0
        what = (f"calls SystemExit({exc}) at import (a codemod must not end the run)"
                if isinstance(exc, SystemExit) else f"fails to import: {type(exc).__name__}: {exc}")
        raise CodemodError(rule.path, rule.line, rule.id, f"{where} {what}") from None
    if rule.scope is not None:
        from ..scoped import ScopedTransform

        transform = getattr(module, "Codemod", None)
        if not (isinstance(transform, type) and issubclass(transform, ScopedTransform)):
            raise CodemodError(rule.path, rule.line, rule.id,
                               f"{where} defines no class Codemod(ScopedTransform) for an 'in:' rule")
        transform.codemod_name = name
        return transform  # type: ignore[return-value]
    rewrite = getattr(module, "rewrite", None)
    if not callable(rewrite):
        raise CodemodError(rule.path, rule.line, rule.id, f"{where} defines no function rewrite(call, site)")
    return rewrite  # type: ignore[no-any-return]


def compile_spec(path: str, rule: Rule) -> list[Rewrite]:
    return [load(path, rule)]


OPERATION = Operation(
    name="codemod",
    keys=("codemod",),
    parse=parse,
    compile=compile_spec,
    describe=lambda spec: f"codemod `{Path(spec).stem}`",
    guardable=False,
    kinds=frozenset({"call", "scope"}),
)

"""Signatures read from vLLM's source with `ast`; nothing is imported.

The reader follows Python's own rules as far as they can be read off the source (imports,
re-exports, the MRO, dataclass-like code generation) and raises `Unknown` with a reason at the
first point where the runtime could differ from what the source says. `StaticSignatures` turns
`Unknown` into "no signature": a wrong guess here would make a guard drop an argument vLLM still
needs.

The layers, bottom up: `scope` (what a body binds), `names` (imports, re-exports, attributes, the
MRO), `ctors` (generated constructors) and `resolver` (functions, and which constructor a class
really has).
"""

from __future__ import annotations

import zipfile
from collections.abc import Iterable
from pathlib import Path

from vllm_shim_patch.errors import SignatureError
from vllm_shim_patch.signatures.model import Param, Signature
from vllm_shim_patch.signatures.static.members import defines
from vllm_shim_patch.signatures.static.resolver import Resolver
from vllm_shim_patch.signatures.static.scope import Unknown

__all__ = ["StaticSignatures"]


class StaticSignatures:
    """Signatures read from vLLM's source with `ast`, importing nothing.

    `root` is a directory holding the `vllm/` package (e.g. site-packages) or a vLLM wheel.
    Modules are parsed on demand, once each.
    """

    kind = "static"

    def __init__(self, root: Path | str):
        root = Path(root)
        if not root.exists():
            raise SignatureError(f"no vLLM source at {root}: the path does not exist")
        try:
            self._resolver = Resolver(root)
        except (OSError, zipfile.BadZipFile) as exc:
            raise SignatureError(f"cannot read {root}: {exc}") from exc
        if not self._resolver.has_package("vllm"):
            hint = (
                " (give the directory that contains vllm/, not vllm/ itself)"
                if root.name == "vllm"
                else ""
            )
            raise SignatureError(f"no vllm package under {root}{hint}")
        self._cache: dict[str, Signature | None] = {}
        self._why: dict[str, str] = {}

    def get(self, qualname: str) -> Signature | None:
        if qualname not in self._cache:
            try:
                raw, origin = self._resolver.signature(qualname)
                self._cache[qualname] = Signature(qualname, tuple(Param(*p) for p in raw), origin)
            except Unknown as exc:
                self._cache[qualname] = None
                self._why[qualname] = str(exc)
            except RecursionError:
                self._cache[qualname] = None
                self._why[qualname] = "the source nests too deeply to follow"
        return self._cache[qualname]

    def get_many(self, qualnames: Iterable[str]) -> dict[str, Signature | None]:
        return {name: self.get(name) for name in qualnames}

    def defines(self, qualname: str) -> bool | None:
        """Whether class attribute `a.b.C.attr` exists (None: cannot be told from the source)."""
        try:
            return defines(self._resolver.names, qualname)
        except RecursionError:
            return None

    def unknown_reason(self, qualname: str) -> str | None:
        """Why `get(qualname)` gave None (after a get), else None."""
        return self._why.get(qualname)

    @property
    def parsed_modules(self) -> list[str]:
        """The modules read so far (lookups parse only what they need)."""
        return self._resolver.parsed_modules()

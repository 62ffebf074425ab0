"""Which signature source decides: guards read vLLM's source; verification asks the live vLLM.

Guards run at plan time, so they read source (milliseconds) rather than import vLLM (seconds);
verification binds against what really imports, falling back to the source when vLLM does not.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import SignatureError
from ..kinds import SignatureKind

if TYPE_CHECKING:
    from ..target import Target


def guard_source(target: Target, vllm_source: str | None, cache_dir: Path | None = None) -> Any:
    """The static source that guards rules, or None when no vLLM source is known (unguarded).

    Its answers are cached under `cache_dir` (default: the tool's cache dir, never the target's
    site-packages), so a second run over an unchanged vLLM reads no source.
    """
    from . import StaticSignatures
    from .static.cache import default_cache_dir

    if vllm_source:
        return source_reader(vllm_source, cache_dir)
    cache = cache_dir if cache_dir is not None else default_cache_dir()
    if target.vllm_location is not None:
        return StaticSignatures(target.vllm_location, cache_dir=cache)
    return None


def source_reader(vllm_source: str, cache_dir: Path | None = None) -> Any:
    """The static reader of a --vllm-source (which needs nothing of the target)."""
    from . import StaticSignatures
    from .static.cache import default_cache_dir

    cache = cache_dir if cache_dir is not None else default_cache_dir()
    return StaticSignatures(Path(vllm_source).expanduser(), cache_dir=cache)


def wants_live(target: Target, *, vllm_source: str | None, static: bool) -> bool:
    """Whether calls are bound against the live vLLM (else against its source)."""
    return not static and not vllm_source and target.vllm_location is not None


def binding_signatures(target: Target, callees: set[str], *, vllm_source: str | None, static: bool,
                       probe: dict[str, Any] | None = None) -> tuple[dict[str, Any], SignatureKind | None, str]:
    """Signatures to bind calls against: (qualname → Signature | None, kind, note).

    Live by default; static with `static` or a `vllm_source`, or when vLLM does not import.
    `probe` is the live answer when the target session already asked for it.
    """
    from . import LiveSignatures

    note = ""
    if wants_live(target, vllm_source=vllm_source, static=static):
        try:
            env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
            live = LiveSignatures(target.python, env=env)
            found = live.get_many(sorted(callees)) if probe is None else live.accept(probe, sorted(callees))
            return found, SignatureKind.LIVE, note
        except SignatureError as exc:
            first = str(exc).splitlines()[0]
            note = f"vLLM does not import in the target ({first}): bound against its source instead"
    source = guard_source(target, vllm_source)
    if source is None:
        return dict.fromkeys(callees), None, "no vLLM in the target and no --vllm-source: binding not checked"
    return source.get_many(sorted(callees), fresh=True), SignatureKind.STATIC, note

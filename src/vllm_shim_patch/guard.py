"""Choose the signature source that guards rules: the installed vLLM's own source, read statically.

Guards run at plan time, so they read source (milliseconds) rather than import vLLM (seconds);
verification binds against the live signatures afterwards.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .cli import Settings
    from .target import Target


def signature_source(s: Settings, target: Target) -> Any:
    """A SignatureSource, or None when no vLLM source is known (rules are then unguarded)."""
    from .signatures import StaticSignatures

    if s.vllm_source:
        return StaticSignatures(Path(s.vllm_source).expanduser())
    if target.vllm_location is not None:
        return StaticSignatures(target.vllm_location)
    return None

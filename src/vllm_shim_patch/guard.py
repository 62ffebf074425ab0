"""Which signature source decides: guards read vLLM's source; verification asks the live vLLM.

Guards run at plan time, so they read source (milliseconds) rather than import vLLM (seconds);
verification binds against what really imports, falling back to the source when vLLM does not.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import SignatureError

if TYPE_CHECKING:
    from .cli import Settings
    from .target import Target


def signature_source(s: Settings, target: Target) -> Any:
    """The static source that guards rules, or None when no vLLM source is known (unguarded)."""
    from .signatures import StaticSignatures

    if s.vllm_source:
        return StaticSignatures(Path(s.vllm_source).expanduser())
    if target.vllm_location is not None:
        return StaticSignatures(target.vllm_location)
    return None


def binding_signatures(s: Settings, target: Target, callees: set[str]) -> tuple[dict[str, Any], str | None, str]:
    """Signatures to bind calls against: (qualname → Signature | None, kind, note).

    Live by default; static with --static or --vllm-source, or when vLLM does not import.
    """
    from .signatures import LiveSignatures

    note = ""
    if not s.static and not s.vllm_source and target.vllm_location is not None:
        try:
            env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
            live = LiveSignatures(target.python, env=env)
            return live.get_many(sorted(callees)), "live", note
        except SignatureError as exc:
            first = str(exc).splitlines()[0]
            note = f"vLLM does not import in the target ({first}): bound against its source instead"
    source = signature_source(s, target)
    if source is None:
        return dict.fromkeys(callees), None, "no vLLM in the target and no --vllm-source: binding not checked"
    return source.get_many(sorted(callees)), "static", note

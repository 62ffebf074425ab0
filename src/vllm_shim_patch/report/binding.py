"""The sentences for a binding result and an existence answer, for rendering: worded once in
`signatures/words.py` (below `analysis/`, which carries them in its verdicts)."""

from __future__ import annotations

from ..signatures.words import bind_reason, existence_reason

__all__ = ["bind_reason", "existence_reason"]

"""Small text helpers shared by every report (standard library only)."""

from __future__ import annotations


def plural(n: int, word: str, many: str | None = None) -> str:
    return f"{n} {word if n == 1 else (many or word + 's')}"

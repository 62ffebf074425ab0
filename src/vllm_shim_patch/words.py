"""Counting words every message needs: plurals, verb agreement, short listings (standard library
only, at the bottom: an error raised in overlay/ or analysis/ counts too)."""

from __future__ import annotations


def plural(n: int, word: str, many: str | None = None) -> str:
    return f"{n} {word if n == 1 else (many or word + 's')}"


def agree(n: int, one: str, many: str) -> str:
    """The verb that agrees with a count: agree(1, "differs", "differ")."""
    return one if n == 1 else many


def listing(paths: list[str], limit: int = 5) -> str:
    shown = ", ".join(paths[:limit])
    return shown + (f" and {len(paths) - limit} more" if len(paths) > limit else "")

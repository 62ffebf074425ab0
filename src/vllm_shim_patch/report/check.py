"""`--check` as text: patched, patched but left for a human, or not patched."""

from __future__ import annotations

from ..words import agree, listing, plural


def not_patched(who: str, version: str, pending: list[str]) -> str:
    return (f"{who} is not patched for vLLM {version}: {plural(len(pending), 'file')} would change "
            f"({listing(pending)}); run patch-speculators --vllm-version {version}")


def for_a_human(who: str, version: str, human: list[str], left: int) -> str:
    return "\n".join([*human, f"{who} is patched for vLLM {version}, but {plural(left, 'place')} "
                              f"{agree(left, 'needs', 'need')} a human (above)"])


def patched(who: str, version: str, edits: int) -> str:
    return f"{who} is patched for vLLM {version} ({edits} edits in place)"

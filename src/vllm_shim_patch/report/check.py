"""`--check` as text: patched, patched but left for a human, or not patched; and the lines `--check`
and apply say when "patched" would not be true of what runs."""

from __future__ import annotations

from typing import Any

from ..words import agree, listing, plural


def not_patched(who: str, version: str, pending: list[str]) -> str:
    return (f"{who} is not patched for vLLM {version}: {plural(len(pending), 'file')} would change "
            f"({listing(pending)}); run patch-speculators --vllm-version {version}")


def for_a_human(who: str, version: str, human: list[str], left: int) -> str:
    return "\n".join([*human, f"{who} is patched for vLLM {version}, but {plural(left, 'place')} "
                              f"{agree(left, 'needs', 'need')} a human (above)"])


def patched(who: str, version: str, edits: int) -> str:
    return f"{who} is patched for vLLM {version} ({edits} edits in place)"


def not_rehearsed(who: str, version: str, edits: int, why: str) -> str:
    return (f"{who} is patched for vLLM {version} ({edits} edits in place) but not rehearsed ({why}): "
            f"run patch-speculators rehearse, or pass --allow-unrehearsed to accept it")



def missing_line(who: str, version: Any, missing: list[str], package: str) -> str:
    n = len(missing)
    return (f"{who} is not patched for vLLM {version}: {plural(n, 'source file')} RECORD lists "
            f"{agree(n, 'is', 'are')} missing ({listing(missing)}); reinstall {package} and patch it again")


def unrecorded_line(who: str, version: Any, files: list[tuple[str, list[str]]], package: str) -> str:
    shown = listing([f"{p} ({', '.join(ids)})" if ids else p for p, ids in files])
    n = len(files)
    return (f"{who} is not patched for vLLM {version}: the rules apply to {plural(n, 'file')} RECORD does "
            f"not list, which apply never edits: {shown}; reinstall {package} so RECORD lists "
            f"{agree(n, 'it', 'them')}")


def runs_instead_line(who: str, version: Any, stale: list[str]) -> str:
    n = len(stale)
    return (f"{who} is patched for vLLM {version}, but Python runs {plural(n, 'unchecked-hash .pyc file')} "
            f"instead of the patched source ({listing(stale)}): delete {agree(n, 'it', 'them')}")


def leftover_line(path: str, runs_instead: bool) -> str:
    why = ("unchecked-hash bytecode, which Python runs instead of the patched source: delete it" if runs_instead
           else "Python checks it against the patched source, so it will not run")
    return f"note: could not delete stale bytecode {path}: {why}"


def unrecorded_note(files: list[tuple[str, list[str]]], package: str) -> str:
    shown = listing([f"{p} ({', '.join(ids)})" if ids else p for p, ids in files])
    n = len(files)
    return (f"note: the rules apply to {plural(n, 'file')} RECORD does not list, which apply does not edit: "
            f"{shown}; reinstall {package} so RECORD lists {agree(n, 'it', 'them')}")


def shadowed_line(who: str, location: Any, shadowed: list[tuple[str, str | None]]) -> str:
    """`shadowed`: (top-level package, the file found instead), as `Target.shadowed` gives them."""
    top, origin = shadowed[0]
    return (f"{who} in {location} is not what runs: the target imports {top} from {origin} (a copy earlier on "
            f"sys.path, e.g. PYTHONPATH or the working folder, shadows it); remove that copy from the path")

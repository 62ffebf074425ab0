"""Searches of a vLLM source's files, beyond the modules a lookup parses: where a name is defined
at top level now (for a missing import), whether any module defines or sets a name, whether a
module makes its names at run time, whether a compiled module is there. Byte searches through
the one open source (`vllm_source.VllmSource`); an answer that read the whole tree is not kept
on disk (`members.py` says which)."""

from __future__ import annotations

import re
from typing import Any

from vllm_shim_patch.vllm_source import LISTING, VllmSource, listing

__all__ = ["compiled", "defined_somewhere", "dynamic_module", "relocated"]


def relocated(source: VllmSource, name: str) -> list[str]:
    """Public modules of vLLM (no `_` component) that define `name` at top level, shortest first."""
    pattern = re.compile(
        rb"^(?:(?:async\s+)?def|class)\s+" + re.escape(name.encode()) + rb"\b|^" + re.escape(name.encode())
        + rb"\s*(?::|=(?!=))", re.MULTILINE)
    found = []
    for rel, data in source.sources(where=lambda rel: not any(p.startswith("_") for p in _module_parts(rel))):
        if name.encode() in data and pattern.search(data):
            found.append(".".join(_module_parts(rel)))
    found.sort(key=lambda m: (m.count("."), m))
    return found


def _module_parts(rel: str) -> list[str]:
    parts = rel[: -len(".py")].split("/")
    if parts[-1] == "__init__":
        parts.pop()
    return parts


_DYNAMIC_MARKS = ((b"globals()", "passes or writes globals()"), (b"sys.modules[__name__]", "writes itself"),
                  (b"vars()", "writes vars()"))


def dynamic_module(source: VllmSource, path: str) -> str:
    """Why a module's names may be made at run time (generated protobuf code fills globals())."""
    try:
        data = source.read(path)
    except OSError:
        return ""
    return next((why for mark, why in _DYNAMIC_MARKS if mark in data), "") if data is not None else ""


_EXTENSIONS = (".so", ".pyd")
_COMPILED: dict[str, tuple[list[str] | None, dict[str, Any]]] = {}


def compiled(source: VllmSource, name: str) -> tuple[bool | None, dict[str, Any]]:
    """Whether a compiled module `name` is in the source, or listed in its dist-info RECORD (None:
    neither holds a compiled file, e.g. a git checkout); and the listing stamp of every directory
    walked to tell (the RECORD and a wheel are the signature cache's own deps)."""
    key = str(source.root)
    if key not in _COMPILED:
        walked: dict[str, Any] = {}
        if source.is_wheel:
            files = [n for n in source.names() if n.startswith("vllm/") and n.endswith(_EXTENSIONS)]
        else:
            files = []
            # `__pycache__` is not walked: nothing in it is importable as a module, and its
            # listing changes whenever an import writes bytecode.
            for rel, dirnames, filenames in source.walk():
                walked[rel + LISTING] = listing(source.root / rel)
                files += [f"{rel}/{n}" for n in (*dirnames, *filenames) if n.endswith(_EXTENSIONS)]
            if not files:  # the `.py` files of a wheel: its RECORD still lists the compiled ones
                for record in source.dist_info("RECORD"):
                    data = source.read(record)
                    rows = data.decode("utf-8", "replace").splitlines() if data is not None else []
                    files += [r.split(",", 1)[0] for r in rows if r.split(",", 1)[0].endswith(_EXTENSIONS)]
        _COMPILED[key] = (files or None, walked)
    known, walked = _COMPILED[key]
    if known is None:
        return None, walked
    rel = name.replace(".", "/")
    return any(f.startswith(rel + ".") and f.count("/") == rel.count("/") for f in known), walked


_DEFINED: dict[tuple[str, str], str] = {}


def defined_somewhere(source: VllmSource, attr: str) -> str:
    """The first vLLM module that defines, assigns or `setattr`s `attr` in any spelling ("" if none)."""
    key = (str(source.root), attr)
    if key not in _DEFINED:
        name = re.escape(attr.encode())
        # A def, an assignment, `obj.attr = ...`, or `setattr(obj, "attr", ...)`.
        pattern = re.compile(rb"def\s+" + name + rb"\b|\b" + name + rb"\s*(?::|=(?!=))|\." + name + rb"\s*=(?!=)"
                             rb"|setattr\([^,\n]*,\s*[\"']" + name + rb"[\"']")
        _DEFINED[key] = ""
        for rel, data in source.sources():
            if attr.encode() in data and pattern.search(data):
                _DEFINED[key] = rel[: -len(".py")].replace("/", ".")
                break
    return _DEFINED[key]

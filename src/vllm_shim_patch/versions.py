"""Which vLLM version the rules are for: the version options, the installed vLLM, and the version
a vLLM source folder or wheel carries (read off its files, nothing imported). Kept apart from the
engine so commands that only check versions import no libcst."""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

from packaging.version import InvalidVersion, Version

from .errors import TargetError, UsageError
from .vllm_source import VllmSource


def parse_version(text: str, what: str) -> Version:
    try:
        return Version(text)
    except InvalidVersion:
        raise UsageError(f"{what} {text!r} is not a version like 0.16 or 0.16.1.dev45+g1a2b3c4") from None


def satisfies(installed: str | None, specifier: str) -> bool:
    """Whether an installed distribution's version meets a rule's `requires:` specifier (an
    installed pre-release is compared like any version, never refused for being one)."""
    from packaging.specifiers import SpecifierSet

    if installed is None:
        return False
    try:
        return SpecifierSet(specifier).contains(Version(installed), prereleases=True)
    except InvalidVersion:
        return False


def in_series(version: Version, series: Version) -> bool:
    """Whether `version` is in the series `series` names: 0.16 holds 0.16.0 and the nightly
    0.16.1.dev45+g1a2b3c4.cu129; 0.16.0 holds 0.16.0 alone (and its dev and local builds)."""
    head = version.release[: len(series.release)]
    return head + (0,) * (len(series.release) - len(head)) == series.release


def resolve_version(requested: str | None, installed: str | None, python: str,
                    source: tuple[str, str | None] | None = None) -> tuple[Version, str | None]:
    """The vLLM version rules are selected for, and a note on where it came from.

    `source` is the --vllm-source path and the version it carries (None: none readable). The
    version is --vllm-version, else the source's, else the installed vLLM's. A --vllm-version
    that contradicts the installed vLLM or the given source is an error, never a guess.
    """
    src_path, src_version = source or (None, None)
    if requested is not None:
        wanted = parse_version(requested, "--vllm-version")
        if installed is not None and not in_series(parse_version(installed, "installed vLLM version"), wanted):
            raise UsageError(
                f"--vllm-version {requested} does not match the installed vLLM {installed} in {python}: "
                f"leave out --vllm-version, or give --python the interpreter that has vLLM {requested}"
            )
        if src_version is not None and not in_series(parse_version(src_version, "vLLM source version"), wanted):
            raise UsageError(
                f"--vllm-version {requested} does not match the vLLM source {src_path} ({src_version}): "
                f"leave out --vllm-version, or give --vllm-source the vLLM {requested} source"
            )
        if installed is not None:
            return wanted, None
        if src_path is not None:
            return wanted, (f"vLLM is not installed in {python}: "
                            "guards read the vLLM source given with --vllm-source")
        return wanted, f"vLLM is not installed in {python}: rules selected for --vllm-version {requested} alone"
    if src_version is not None:
        version = parse_version(src_version, f"the version of the vLLM source {src_path}")
        if installed is None:
            return version, (f"vLLM is not installed in {python}: rules selected for the vLLM source "
                             f"given with --vllm-source ({src_version})")
        if parse_version(installed, "installed vLLM version") != version:
            return version, (f"the vLLM source given with --vllm-source is {src_version}, the installed vLLM "
                             f"{installed}: rules and guards follow the source")
        return version, None
    if installed is None:
        if src_path is not None:
            raise TargetError(f"no vLLM installed in {python}, and the vLLM source {src_path} carries no version "
                              f"(no vllm-*.dist-info, no vllm/_version.py): pass --vllm-version (e.g. --vllm-version 0.16)")
        raise TargetError(f"no vLLM installed in {python}: give --vllm-source the vLLM source folder or wheel "
                          f"to check against (it carries its version), or pass --vllm-version (e.g. 0.16)")
    return parse_version(installed, "installed vLLM version"), None


_VERSION_ASSIGN = re.compile(r"""^(?:__version__|version)\s*(?::\s*str\s*)?=\s*(?:\w+\s*=\s*)?['"]([^'"]+)['"]""", re.MULTILINE)


def source_version(root: Path) -> str | None:
    """The vLLM version a source folder or wheel carries, read without importing it: the
    dist-info's METADATA, else the version setuptools-scm wrote into vllm/_version.py (or an
    older vllm/version.py). None when it carries none (a bare checkout)."""
    def metadata(text: str) -> str | None:
        head = text.split("\n\n", 1)[0]
        names = re.findall(r"^Name:\s*(\S+)", head, re.MULTILINE)
        found = re.findall(r"^Version:\s*(\S+)", head, re.MULTILINE)
        return found[0] if found and names and names[0].lower() == "vllm" else None

    try:
        with VllmSource(root) as source:
            def text(data: bytes) -> str:  # a folder's files as read_text reads them (newlines translated)
                out = data.decode("utf-8", "replace")
                return out if source.is_wheel else out.replace("\r\n", "\n").replace("\r", "\n")

            found = [v for rel in source.dist_info("METADATA")
                     if (data := source.read(rel)) is not None and (v := metadata(text(data)))]
            if source.is_wheel and found:
                return found[0]
            if not source.is_wheel and len(set(found)) == 1:
                return found[0]
            texts = [text(data) for rel in ("vllm/_version.py", "vllm/version.py")
                     if (data := source.read(rel)) is not None]
    except (OSError, zipfile.BadZipFile):
        return None
    for content in texts:
        match = _VERSION_ASSIGN.search(content)
        if match:
            return match.group(1)
    return None

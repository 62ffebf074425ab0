"""The checks before anything is read further or written: each refuses a run that could not be
right (a package no rule is for, a --vllm-version that contradicts the installed vLLM, an
editable, sourceless or patched-wheel install, a read-only or linked one), with the error that
names the fix.

`Context.load` runs the ones every planning command needs, in their order; apply and rollback
run the write checks before their first write.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ..errors import TargetError, UsageError

if TYPE_CHECKING:
    from packaging.version import Version

    from ..rewrite.rule import RulePack
    from ..target import Target


def check_package(package: str, pack: RulePack) -> None:
    """Refuse --package naming a distribution the rules are not for: its files would be
    recorded and called patched with no rule ever looking at them."""
    from ..words import listing

    if not pack.targets(package):
        raise UsageError(f"--package {package}: the rules are for "
                         f"{listing(list(pack.packages))} only (a rule file's 'package:' "
                         f"names the package it is for); nothing was recorded")


def check_version(vllm_version: str | None, target: Target, source: tuple[str, str | None] | None) -> Version:
    """The vLLM version rules are for; fails on a --vllm-version that contradicts the installed
    vLLM or --vllm-source (`source`: its path and version) before anything is read further or
    written (make_plan resolves it again, cheaply)."""
    from ..versions import resolve_version

    return resolve_version(vllm_version, target.vllm_version, target.python, source)[0]


def refuse_editable(target: Target) -> None:
    if target.editable:
        raise TargetError(
            f"{target.package} is installed in editable mode from {target.editable}: "
            f"patch that source checkout with git instead"
        )


def refuse_patched_wheel(target: Target, command: str) -> None:
    """An install from a patched wheel is checked (--check), never patched again in place nor
    built from: it is no release as published."""
    from ..fleet.installed import find
    from ..report.wheel import refuse_patched_wheel

    found = find(target)
    if found is not None:
        raise UsageError(refuse_patched_wheel(f"{target.package} {target.version}", found, command))


def refuse_sourceless(target: Target) -> None:
    """The rules read the .py files RECORD lists: without them, "0 edits" would read as patched."""
    t = target
    if t.python_files():
        return
    compiled = [e.path for e in t.record if e.path.endswith(".pyc") and "__pycache__/" not in e.path]
    if compiled:
        raise TargetError(
            f"{t.package} {t.version} in {t.location} is installed without its source (RECORD lists "
            f"{len(compiled)} .pyc files and no .py file): the rules rewrite source; reinstall it from "
            f"its wheel (pip install --force-reinstall --no-deps {t.package}=={t.version})"
        )


def check_mounted_writable(target: Target) -> None:
    """Before the first write (the overlay): a package on a read-only mount cannot be patched at all."""
    try:
        readonly = bool(os.statvfs(target.location).f_flag & os.ST_RDONLY)
    except OSError:
        return
    if readonly:
        raise TargetError(
            f"{target.location} is on a read-only filesystem: patch {target.package} where its "
            f"environment is built (e.g. in the image's Dockerfile); nothing was changed"
        )


def check_writable(target: Target, paths: list[str]) -> None:
    """Before writing `paths`: each is a file (not a link) the user may replace."""
    for path in paths:
        full = target.location / path
        if full.is_symlink():
            # A linked install (uv --link-mode=symlink): replacing the link would detach it, and
            # the overlay would record the link, not the bytes RECORD describes.
            raise TargetError(
                f"{full} is a symbolic link (a linked install?): reinstall {target.package} with "
                f"copied files (e.g. uv --link-mode=copy) to patch it; nothing was changed"
            )
        if not os.access(full.parent, os.W_OK) or (full.exists() and not os.access(full, os.W_OK)):
            raise TargetError(
                f"cannot write {full} (read-only): run as the owner of that environment; nothing was changed"
            )

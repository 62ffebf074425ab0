"""The package's files: the overlay that records them (opened once, its integrity checked first),
the files it tracks, their original bytes and their bytes as installed, and the sources RECORD
lists that are gone or that it does not list."""

from __future__ import annotations

import os
from functools import cached_property
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ...overlay.repo import Overlay
    from ...target import Target
    from .probe import TargetProbe


class PackageFiles:
    """The files of `probe`'s package, and the overlay under `state_dir` that records them."""

    def __init__(self, state_dir: str | None, probe: TargetProbe):
        self._state_dir = state_dir
        self._probe = probe

    @property
    def _target(self) -> Target:
        return self._probe.target

    @cached_property
    def overlay(self) -> Overlay:
        from ...overlay.integrity import check_overlay
        from ...overlay.layout import overlay_for
        from ...overlay.repo import Overlay

        t = self._target
        path = overlay_for(self._state_dir, t.package, t.location)
        # Before anything reads or writes it: a damaged overlay must not pass for "already patched",
        # nor one of another user's or another environment's be read at all.
        check_overlay(path, t.package, t.version, t.location)
        return Overlay(path, t.location, allowed=self.tracked)

    @cached_property
    def tracked(self) -> list[str]:
        """The distribution's files the overlay records."""
        from ...overlay.layout import tracked_paths

        return tracked_paths(e.path for e in self._target.record)

    def installed(self) -> dict[str, bytes]:
        """The bytes of the package's .py files as they are now (a file RECORD names but that is
        gone or unreadable is left out)."""
        t = self._target
        out = {}
        for path in t.python_files():
            try:
                out[path] = (t.location / path).read_bytes()
            except OSError:
                continue
        return out

    def originals(self) -> dict[str, bytes]:
        """The original bytes of the package's .py files (read anew: a baseline may just have moved)."""
        from ...overlay.baseline import original_bytes

        return original_bytes(self.overlay, self._target, self._target.python_files())

    def missing(self) -> list[str]:
        """The .py files RECORD lists that are not on disk (deleted, e.g. to ship bytecode only)."""
        t = self._target
        return [p for p in t.python_files() if not (t.location / p).is_file()]

    def unrecorded(self) -> list[str]:
        """.py files in the package's own folders that RECORD does not list: the rules never read them."""
        t = self._target
        listed = {e.path for e in t.record}
        tops = sorted({e.path.split("/", 1)[0] for e in t.record
                       if "/" in e.path and not e.path.startswith("..") and ".dist-info/" not in e.path
                       and not e.path.split("/", 1)[0].endswith(".data")})
        found = []
        for top in tops:
            root = t.location / top
            if not root.is_dir() or root.is_symlink():
                continue
            for dirpath, dirnames, filenames in os.walk(root):
                dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
                rel = os.path.relpath(dirpath, t.location).replace(os.sep, "/")
                found += [f"{rel}/{f}" for f in sorted(filenames) if f.endswith(".py") and f"{rel}/{f}" not in listed]
        return found

"""Before anything is read from an overlay: it is a folder of this user's that nobody else can
write, and none of its entries is a link (git's `safe.directory`, made stricter).

Standard library only, no git: `status` runs it first. Only the overlay folder, its git folder
and their entries are looked at; this tool writes nothing group- or other-writable there.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ..errors import UntrustedOverlayError
from ..fsutil import trust_fault
from .layout import GIT_DIR


def check_trusted(overlay: Path) -> None:
    """Raise UntrustedOverlayError, saying how to fix it, unless the overlay may be trusted."""
    try:
        st = os.lstat(overlay)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise UntrustedOverlayError(
            f"the overlay {overlay} is a symbolic link (to {os.readlink(overlay)}): an overlay records one "
            f"environment, never two; remove the link (rm {overlay}) and run again; nothing was changed")
    if not stat.S_ISDIR(st.st_mode):
        raise UntrustedOverlayError(f"the overlay {overlay} is not a folder: move it away (mv {overlay} "
                                    f"{overlay}.damaged) and run again; nothing was changed")
    _check_entry(overlay, overlay, st)
    for folder in (overlay, overlay / GIT_DIR):
        try:
            entries = list(os.scandir(folder))
        except (FileNotFoundError, NotADirectoryError):
            continue
        if folder != overlay:
            _check_entry(overlay, folder, os.lstat(folder))
        for entry in entries:
            path = Path(entry.path)
            st = entry.stat(follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                raise UntrustedOverlayError(
                    f"{path} is a symbolic link, not a file this tool wrote: remove it (rm {path}) and run "
                    f"again; nothing was changed")
            _check_entry(overlay, path, st)


def _check_entry(overlay: Path, path: Path, st: os.stat_result) -> None:
    fault = trust_fault(st)
    if fault == "owner":
        me = os.geteuid()
        raise UntrustedOverlayError(
            f"the overlay {overlay} is not yours: {path} is owned by uid {st.st_uid}, you run as uid {me}; run "
            f"as its owner, or take it over (chown -R {me} {overlay}) and run again; nothing was changed")
    if fault == "writable":
        raise UntrustedOverlayError(
            f"the overlay {overlay} is writable by other users ({path} has mode {stat.S_IMODE(st.st_mode):04o}): "
            f"fix it (chmod -R go-w {overlay}) and run again; nothing was changed")

"""Check the overlay before trusting it: its records readable, every object of its states intact.

Standard library only, and no git process: the overlay never packs its objects (``gc.auto 0``),
so each commit, tree and blob of the recorded states is read as a loose object and its SHA-1
checked. That costs milliseconds, so every command (`status` included) runs it first. Objects
someone packed (``git gc``) are looked up in the packs' indexes; their bytes are left to git.
"""

from __future__ import annotations

import hashlib
import os
import re
import zlib
from pathlib import Path
from typing import Any

from ..errors import DamagedOverlayError, UntrustedOverlayError
from ..fsutil import read_private
from .layout import GIT_DIR, read_journal, read_state
from .trust import check_trusted

_SHA = re.compile(r"[0-9a-f]{40}")
_REF = re.compile(r"refs/(heads|tags)/[A-Za-z0-9._-]+")
# Every key the tool's `git init` and `Overlay.create` write: any other (core.fsmonitor, an include,
# a filter or diff driver, an alias) was put there by someone else, and git would act on it.
_CONFIG_KEYS = frozenset({
    "core.repositoryformatversion", "core.filemode", "core.bare", "core.worktree", "core.autocrlf",
    "core.hookspath", "core.fsync", "core.logallrefupdates", "core.ignorecase", "core.precomposeunicode",
    "core.symlinks", "commit.gpgsign", "tag.gpgsign", "gc.auto", "user.name", "user.email",
})
# Tree entries a package's files can make: plain and executable files, folders (never a link or a submodule).
_MODES = frozenset({b"100644", b"100755", b"40000"})


class _Bad(Exception):
    """An object that is missing or corrupt (the message says which)."""


def check_overlay(overlay: Path, package: str, version: str, location: Path | None = None) -> None:
    """Raise DamagedOverlayError naming what is damaged and how to recover; return if all is well.

    First the overlay must be trusted at all (`trust.check_trusted`); with `location`, it must
    have been recorded for that install location (one overlay reached from two environments is not).
    """
    check_trusted(overlay)
    try:
        worktree = _check(overlay)
    except DamagedOverlayError as exc:
        raise DamagedOverlayError(f"{exc}; {recovery(overlay, package, version)}") from None
    if location is not None and worktree is not None and os.fsencode(worktree) != os.fsencode(str(location)):
        raise UntrustedOverlayError(
            f"the overlay {overlay} was recorded for {package} in {worktree}, not in {location} (one overlay "
            f"reached from two environments?): give this one its own (pass another --state-dir, or move "
            f"{overlay} away) and run again; nothing was changed")


def recovery(overlay: Path, package: str, version: str) -> str:
    return (f"move the overlay away (mv {overlay} {overlay}.damaged) and run again: apply records the original "
            f"anew from files checked against RECORD; if the installed files differ from RECORD, restore them "
            f"from the wheel first (pip install --force-reinstall --no-deps {package}=={version})")


def _check(overlay: Path) -> str | None:
    """Check the overlay; the location its git config records (None: no repository yet)."""
    # Both raise DamagedOverlayError on an unreadable file or one of the wrong shape.
    state = read_state(overlay)
    journal = read_journal(overlay)
    gitdir = overlay / GIT_DIR
    if os.path.lexists(gitdir) and not gitdir.is_dir():
        raise DamagedOverlayError(f"the overlay's {gitdir} is not a folder")
    if not gitdir.is_dir():
        if state is not None or journal is not None:
            raise DamagedOverlayError(f"the overlay {overlay} has a state.json or journal.json but no git repository")
        return None
    worktree = _config(gitdir).get("core.worktree")
    store = _Store(gitdir)
    wanted: dict[str, str] = {}
    for ref, what in (("HEAD", "HEAD"), ("refs/tags/original", "the original"), ("refs/tags/patched", "the patched state")):
        sha = store.ref(ref)
        if sha is not None:
            wanted.setdefault(sha, what)
    recorded: list[tuple[str, Any, str]] = []
    if state is not None:
        recorded += [("state.json", state.data["original_commit"], "the recorded original"),
                     ("state.json", state.data["head_commit"], "the recorded HEAD")]
    if journal is not None:
        recorded += [("journal.json", journal[key], f"the interrupted {journal['op']}'s {key.replace('_', ' ')}")
                     for key in ("base_commit", "to_commit") if journal.get(key)]
    for name, sha, what in recorded:
        if not (isinstance(sha, str) and _SHA.fullmatch(sha)):
            raise DamagedOverlayError(f"{overlay / name} is damaged ({what} is {str(sha)[:60]!r}, not a commit)")
        wanted.setdefault(sha, what)
    if state is not None and store.ref("HEAD") is None:
        raise DamagedOverlayError(f"the overlay {overlay} has no HEAD commit although state.json records one")
    seen: set[str] = set()
    for commit, what in wanted.items():
        try:
            store.check_commit(commit, seen)
        except _Bad as exc:
            raise DamagedOverlayError(f"the overlay {overlay} is damaged: {exc} in {what} ({commit[:12]})") from None
    return worktree


def _config(gitdir: Path) -> dict[str, str]:
    """The overlay's git config as this tool wrote it; anything else in it is refused."""
    path = gitdir / "config"
    try:
        data = read_private(path)
    except OSError as exc:
        raise DamagedOverlayError(f"the overlay's {path} is unreadable ({exc.strerror or exc})") from None
    if data is None:
        raise DamagedOverlayError(f"the overlay's {path} is missing")
    section, out = None, {}
    for raw in os.fsdecode(data).splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        header = re.fullmatch(r"\[([A-Za-z0-9.-]+)\]", line)
        if header:
            section = header.group(1).lower()
            continue
        entry = re.fullmatch(r"([A-Za-z][A-Za-z0-9-]*)\s*=\s*(.*)", line)
        key = f"{section}.{entry.group(1).lower()}" if entry and section else None
        if entry is None or key is None or key not in _CONFIG_KEYS:
            what = repr(key) if key else f"the line {line[:60]!r}"
            raise DamagedOverlayError(f"the overlay's git config {path} sets {what}, which this tool never writes "
                                      f"(git would act on it: a hook, an fsmonitor or a filter runs code)")
        out[key] = _unquote(entry.group(2))
    return out


def _unquote(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] == '"':
        value = value[1:-1]
    return value.replace('\\"', '"').replace("\\\\", "\\")


class _Store:
    def __init__(self, gitdir: Path):
        self.gitdir = gitdir
        self.objects = gitdir / "objects"
        self._packed: set[bytes] | None = None

    def ref(self, name: str, depth: int = 0) -> str | None:
        try:
            text = (self.gitdir / name).read_text().strip()
        except (FileNotFoundError, NotADirectoryError):
            text = self._packed_ref(name) or ""
        except (OSError, UnicodeDecodeError) as exc:
            raise DamagedOverlayError(f"the overlay's {name} is unreadable: {exc}") from None
        if text.startswith("ref: ") and depth < 5:
            target = text[5:].strip()
            if not _REF.fullmatch(target):
                # Never read a file the ref names outside refs/ (`ref: ../../../etc/shadow`).
                raise DamagedOverlayError(f"the overlay's {name} points at {target[:60]!r}, not a branch or tag")
            return self.ref(target, depth + 1)
        if not text:
            return None
        if not _SHA.fullmatch(text):
            raise DamagedOverlayError(f"the overlay's {name} holds {text[:60]!r}, not a commit")
        return text

    def _packed_ref(self, name: str) -> str | None:
        try:
            lines = (self.gitdir / "packed-refs").read_text().splitlines()
        except OSError:
            return None
        for line in lines:
            sha, _, ref = line.partition(" ")
            if ref == name:
                return sha
        return None

    def read(self, sha: str, kind: str) -> bytes | None:
        """The object's body, checked against its name; None when it is packed (left to git)."""
        path = self.objects / sha[:2] / sha[2:]
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            if bytes.fromhex(sha) in self._pack_names():
                return None
            raise _Bad(f"{kind} {sha[:12]} is missing") from None
        except OSError as exc:
            raise _Bad(f"{kind} {sha[:12]} is unreadable ({exc.strerror})") from None
        try:
            data = zlib.decompress(raw)
        except zlib.error:
            raise _Bad(f"{kind} {sha[:12]} is corrupt (does not decompress)") from None
        if hashlib.sha1(data).hexdigest() != sha:
            raise _Bad(f"{kind} {sha[:12]} is corrupt (its bytes do not match its name)")
        header, _, body = data.partition(b"\0")
        if header.split(b" ")[0] != kind.encode():
            raise _Bad(f"object {sha[:12]} is a {header.split(b' ')[0].decode(errors='replace')}, not a {kind}")
        return body

    def _pack_names(self) -> set[bytes]:
        """Object names in the packs' .idx files (version 2), read once."""
        if self._packed is None:
            self._packed = set()
            for idx in (self.objects / "pack").glob("*.idx"):
                try:
                    data = idx.read_bytes()
                except OSError as exc:
                    raise _Bad(f"pack index {idx.name} cannot be read: {exc.strerror or exc}") from None
                if data[:4] != b"\xfftOc":
                    continue
                count = int.from_bytes(data[8 + 255 * 4 : 8 + 256 * 4], "big")
                start = 8 + 256 * 4
                self._packed.update(data[start + 20 * i : start + 20 * (i + 1)] for i in range(count))
        return self._packed

    def check_commit(self, sha: str, seen: set[str]) -> None:
        body = self.read(sha, "commit")
        if body is None:
            return
        tree = body.split(b"\n", 1)[0]
        if not tree.startswith(b"tree "):
            raise _Bad(f"commit {sha[:12]} is corrupt (no tree)")
        self._check_tree(tree[5:].decode(), "", seen)

    def _check_tree(self, sha: str, prefix: str, seen: set[str]) -> None:
        if sha in seen:
            return
        body = self.read(sha, "tree")
        seen.add(sha)
        if body is None:
            return
        pos = 0
        while pos < len(body):
            space = body.index(b" ", pos)
            nul = body.index(b"\0", space)
            mode, name = body[pos:space], body[space + 1 : nul].decode(errors="replace")
            child = body[nul + 1 : nul + 21].hex()
            pos = nul + 21
            if mode not in _MODES or name in ("", ".", "..") or name.lower() == ".git" or "/" in name:
                # git's own checks refuse these too; a tree holding one writes outside the package.
                raise _Bad(f"tree {sha[:12]} holds {prefix}{name!r} (mode {mode.decode(errors='replace')}), "
                           f"which no file of a package can be")
            if mode == b"40000":
                self._check_tree(child, f"{prefix}{name}/", seen)
            elif child not in seen:
                try:
                    self.read(child, "blob")
                except _Bad as exc:
                    raise _Bad(f"{exc} (the bytes of {prefix}{name})") from None
                seen.add(child)

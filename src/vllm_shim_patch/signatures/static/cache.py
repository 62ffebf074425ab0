"""The signature cache: answers read from one vLLM source, kept on disk between runs.

Reading vLLM's source costs a parse of every module a lookup passes through (0.1-0.4 s for the
callables speculators uses); the answers change only when the source does. So each answer is
stored with what it was read from, and reused while that is unchanged.

Validity is the stat (kind, size, mtime in ns) of every path the reader looked at, absent paths
included (a new `vllm/x.py` could shadow an answer), plus the vLLM dist-info's RECORD. The
alternatives were weaker or slower: a digest of RECORD alone misses a file edited after install
(the very thing this tool does to speculators), and hashing or stat-ing the whole tree costs
25-80 ms, as much as the work saved. A stat of the ~50-100 paths the answers came from costs
about a millisecond and notices any edit that changes a size or an mtime. For a wheel, its own
stat stands for all of its files. An answer that depends on what a walk of directories found
(that no compiled module is there) records the mtime of each directory walked (`vllm/x/*`):
adding, removing or renaming an entry changes it. An answer that depends on the contents of the
whole tree (a byte search of every file) is not kept (`static/members.py`).

Answers also depend on the reader itself, so the file is keyed by a digest of the reader's
source. One JSON file per source root, written atomically (temp file, rename); a file or entry
that is unreadable, of another format, or stale is ignored and rebuilt, never trusted.

The guards' answers decide what apply writes, so the cache is private: its folders are made 0700
and its files 0600 whatever the umask, and a file (or a folder above it, up to the cache folder)
that is another user's, writable by group or others, or a link is ignored and said so in one line
(`fsutil.read_trusted`). Verification never binds against a cached answer: it reads the source
again (`StaticSignatures.get_many(fresh=True)`), so a wrong answer cannot both write a call and
pass it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from vllm_shim_patch.fsutil import private_folder, read_trusted, trusted_folder
from vllm_shim_patch.vllm_source import LISTING, Stamp, VllmSource, listing, stamp

__all__ = ["FORMAT", "SignatureCache", "default_cache_dir", "reader_digest"]

_WHAT = "the signature cache"

FORMAT = 1
_READER_FILES = ("model.py", "static/__init__.py", "static/cache.py", "static/ctors.py",
                 "static/lazy.py", "static/members.py", "static/names.py",
                 "static/resolver.py", "static/scope.py", "../vllm_source.py")
_digest: str | None = None


def default_cache_dir() -> Path | None:
    """`$VSP_CACHE_DIR`, else `$XDG_CACHE_HOME/vllm-shim-patch`, else `~/.cache/vllm-shim-patch`,
    made absolute once (a later change of folder must not move it); None without a home folder
    or with a HOME that is not one (then nothing is cached)."""
    explicit = os.environ.get("VSP_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser().absolute()
    base = os.environ.get("XDG_CACHE_HOME")
    if not base:
        try:
            home = Path.home()
        except (RuntimeError, KeyError):
            return None
        if not home.is_dir():
            return None  # HOME=/nonexistent: a cache must not create the home folder
        base = str(home / ".cache")
    return Path(base).expanduser().absolute() / "vllm-shim-patch"


def reader_digest() -> str:
    """A digest of the reader's own source: a changed reader may answer differently."""
    global _digest
    if _digest is None:
        here = Path(__file__).parent.parent
        h = hashlib.sha256(str(FORMAT).encode())
        for rel in _READER_FILES:
            path = here / rel
            h.update(rel.encode() + b"\0" + (path.read_bytes() if path.is_file() else b"") + b"\0")
        _digest = h.hexdigest()
    return _digest


class SignatureCache:
    """The answers for one source root: loaded once, saved after each batch of new answers."""

    def __init__(self, cache_dir: Path, root: Path):
        self.root = root.resolve()
        name = hashlib.sha256(str(self.root).encode()).hexdigest()[:20]
        self.cache_dir = cache_dir
        self.path = cache_dir / "signatures" / f"{name}.json"
        self.deps: dict[str, Stamp | None] = {}
        self.tables: dict[str, dict[str, Any]] = {}
        self._load()

    def _fixed_deps(self) -> dict[str, Stamp | None]:
        """What every answer depends on besides the paths read: the wheel, or the dist-info."""
        if self.root.is_file():
            return {"": stamp(self.root)}
        with VllmSource(self.root) as source:
            return {rel: stamp(self.root / rel) for rel in source.dist_info("RECORD")}

    def _load(self) -> None:
        fixed = self._fixed_deps()
        self.deps = dict(fixed)
        raw = read_trusted(self.cache_dir, self.path, _WHAT)
        if raw is None:
            return
        try:
            data = json.loads(raw)
        except ValueError:
            return
        if (
            not isinstance(data, dict)
            or data.get("format") != FORMAT
            or data.get("reader") != reader_digest()
            or data.get("root") != str(self.root)
            or not isinstance(data.get("deps"), dict)
            or not isinstance(data.get("tables"), dict)
        ):
            return
        deps = {k: (tuple(v) if isinstance(v, list) else v) for k, v in data["deps"].items()}
        if any(deps.get(k) != v for k, v in fixed.items()) or set(deps) < set(fixed):
            return
        for rel, was in deps.items():
            if rel in fixed:
                continue
            now = listing(self.root / rel[: -len(LISTING)]) if rel.endswith(LISTING) else stamp(
                self.root / rel.rstrip("/"))
            if now != was:
                return  # a file changed, appeared or went away: everything is read anew
        self.deps = deps
        self.tables = {k: v for k, v in data["tables"].items() if isinstance(v, dict)}

    def table(self, name: str) -> dict[str, Any]:
        return self.tables.setdefault(name, {})

    def save(self, accessed: dict[str, Stamp | None]) -> None:
        """Write the answers, with the paths read for them, atomically; a failure only costs speed."""
        self.deps.update(accessed)
        data = {
            "format": FORMAT,
            "reader": reader_digest(),
            "root": str(self.root),
            "deps": self.deps,
            "tables": self.tables,
        }
        try:
            private_folder(self.path.parent)
            if not trusted_folder(self.cache_dir, self.path.parent, _WHAT):
                return  # another user's folder, or one others can write: nothing of ours goes there
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.")  # 0600
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    # dumps, not dump: dump streams through the pure-Python encoder (~5x slower).
                    f.write(json.dumps(data, separators=(",", ":")))
                os.replace(tmp, self.path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
        except OSError:
            pass  # a read-only or full cache dir: the next run reads the source again

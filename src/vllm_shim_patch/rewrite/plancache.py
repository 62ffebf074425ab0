"""The plan cache: what the engine said of the package's files, kept on disk between runs.

Planning costs libcst's import (~130 ms) and its metadata passes (~200 ms on speculators 0.3.0),
more than everything else `audit` does. Its answer is a pure function of its inputs, so it is
stored under a digest of all of them and reused while none changed:

- the tool's own code: the (path, size, mtime) of every module of the package, so an upgrade or
  an edited checkout never meets a plan an older engine made; the same of libcst's top-level files
  (its `_version.py` and native parser, which an upgrade rewrites: its parser decides what
  parses), and the tool's Python (it words a syntax error);
- the rules: the bytes of every rule file, and of every module in the folder of each codemod
  the rules name (a codemod may import its neighbours), with their paths; and every package a
  codemod imports by name from elsewhere (an `import` or `from ... import` statement anywhere in
  it, found with `ast`; the standard library, libcst and the tool itself are covered above): the
  (path, size, mtime) of each of its files, located without importing it. A module imported
  only by a computed name (`importlib.import_module(name)`) is not covered;
- the vLLM the rules are for: the selected version, the signatures and class facts the guards
  read (their full text, defaults included), and the signature kind;
- the target: its interpreter and Python version (the grammar check), the package, and the path
  and bytes of every file planned;
- the review's declined sites.

The file holds the per-file results after the target's grammar check. The commands that write
nothing read it (`audit`, `--dry-run` and `diff`, `--check`), whatever state dir they are given;
every command that plans writes it, so a dry run after an apply, or after another dry run of the
same files, starts warm. An entry that
is unreadable, of another format, or for other files is ignored and planned anew, never trusted;
a failed write only costs speed. The folder keeps the newest `KEEP` entries.

What is in the cache decides what `--check` says, so it is private: its folders are made 0700 and
its entries 0600 whatever the umask, and an entry (or a folder above it, up to the cache folder)
that is another user's, writable by group or others, or a link is ignored and said so in one line
(`fsutil.read_trusted`). Even so a hit is not all `--check` rests on (`commands/check.py`).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..fsutil import private_folder, read_trusted, trusted_folder
from ..kinds import Action, FileStatus
from .results import FileResult, Site

FORMAT = 2  # a site of another shape (1: before `by`) is of another format: planned anew
KEEP = 32
_code_stamp: str | None = None


def code_stamp() -> str:
    """The code that makes a plan, as installed: the tool's modules and libcst's (size and mtime
    of each, found without importing libcst; stat only, ~2 ms), and the tool's Python."""
    global _code_stamp
    if _code_stamp is None:
        import importlib.util
        import sys

        h = hashlib.sha256(f"{FORMAT}\0{sys.version}\0{sys.executable}".encode())
        ours = Path(__file__).resolve().parent.parent
        for dirpath, dirnames, filenames in os.walk(ours):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            for name in sorted(filenames):
                if name.endswith(".py"):
                    _stamp(h, ours, os.path.join(dirpath, name))
        # libcst's top level (its `_version.py` and native parser; an upgrade rewrites them).
        spec = importlib.util.find_spec("libcst")
        if spec is not None and spec.origin:
            theirs = Path(spec.origin).resolve().parent
            with os.scandir(theirs) as entries:
                for entry in sorted(entries, key=lambda e: e.name):
                    if entry.name.endswith((".py", ".so", ".pyd")):
                        _stamp(h, theirs.parent, entry.path)
        _code_stamp = h.hexdigest()
    return _code_stamp


def _stamp(h: Any, root: Path, path: str) -> None:
    st = os.stat(path)
    h.update(f"{os.path.relpath(path, root)}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())


def plan_key(*, target: Any, rules: Sequence[Any], version: Any, signatures: Mapping[str, Any] | None,
             kind: Any, facts: Mapping[str, bool | None] | None, declined: frozenset[tuple[str, int, str]],
             files: Mapping[str, bytes]) -> str | None:
    """The digest of everything the plan depends on; None when an input cannot be read (no cache)."""
    h = hashlib.sha256()

    def part(*items: object) -> None:
        for item in items:
            h.update(item if isinstance(item, bytes) else str(item).encode("utf-8", "surrogateescape"))
            h.update(b"\0")

    part("code", code_stamp())
    codemod_files = {Path(str(spec)) for r in rules for op, spec in r.ops if op == "codemod"}
    codemod_dirs = {p.parent for p in codemod_files}
    try:
        codemods = {str(p) for d in codemod_dirs for p in d.glob("*.py")}
        sources = {path: Path(path).read_bytes() for path in sorted({r.path for r in rules} | codemods)}
    except OSError:
        return None
    for path, data in sources.items():
        part("source", path, data)
    neighbours = {Path(p).stem for p in codemods}
    # The bundled codemods import only the standard library, libcst, the tool and one another
    # (tests/rewrite/test_plancache.py holds them to it): no scan of theirs (~2 ms a file).
    bundled = _bundled_codemods()
    scanned = [p for p in codemods if Path(p).resolve().parent != bundled]
    for top in sorted({t for p in scanned for t in _imported(sources[p])} - neighbours - _COVERED):
        part("imports", top)
        for stamp in _package_stamps(top):
            part(stamp)
    for rule in rules:  # which of the files' rules are loaded (the bundled ones may be left out)
        part("rule", rule.id)
    part("version", version, "kind", kind)
    for name in sorted(signatures or {}):
        part("sig", name, repr((signatures or {})[name]))
    part("no-signatures" if signatures is None else "signatures")
    for name in sorted(facts or {}):
        part("fact", name, (facts or {})[name])
    part("no-facts" if facts is None else "facts")
    for site in sorted(declined):
        part("declined", *site)
    part("target", target.python, target.python_version, target.package, target.version, target.location)
    for path in sorted(files):
        part("file", path, hashlib.sha256(files[path]).hexdigest())
    return h.hexdigest()


# What a codemod imports that the code stamp covers already (or that cannot change under it).
_COVERED = frozenset({"__future__", "libcst", "vllm_shim_patch"})


def _bundled_codemods() -> Path | None:
    """The folder of the codemods shipped with the tool (nothing imported but the package name)."""
    from importlib import resources

    try:
        return Path(str(resources.files("vllm_shim_patch.codemods"))).resolve()
    except (ImportError, TypeError, OSError):
        return None


def _imported(source: bytes) -> set[str]:
    """The top-level names of the modules `source` imports absolutely (a codemod: loaded by path)."""
    import ast
    import sys

    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return set()  # the codemod cannot load: the engine says so, nothing to follow
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.add(node.module.split(".")[0])
    return {n for n in names if n not in sys.stdlib_module_names}


def _package_stamps(top: str) -> list[str]:
    """(relative path, size, mtime) of every file of the top-level module or package `top`, found
    by the import system's finders (nothing is imported); none found: that, said."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        return ["not importable"]
    roots = list(spec.submodule_search_locations or []) or ([spec.origin] if spec.origin else [])
    stamps = []
    for root in roots:
        if os.path.isfile(root):
            st = os.stat(root)
            stamps.append(f"{root}\0{st.st_size}\0{st.st_mtime_ns}")
            continue
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            for name in sorted(filenames):
                path = os.path.join(dirpath, name)
                try:
                    st = os.stat(path)
                except OSError:
                    continue
                stamps.append(f"{path}\0{st.st_size}\0{st.st_mtime_ns}")
    return stamps


class PlanCache:
    def __init__(self, cache_dir: Path):
        self.root = cache_dir
        self.folder = cache_dir / "plans"

    @property
    def empty(self) -> bool:
        """No plan stored yet (a first run), or none to be trusted: the engine will surely run."""
        if not trusted_folder(self.root, self.folder, _WHAT):
            return True
        try:
            with os.scandir(self.folder) as entries:
                return not any(e.name.endswith(".json") and not e.name.startswith(".") for e in entries)
        except OSError:
            return True

    def get(self, key: str, files: Mapping[str, bytes]) -> list[FileResult] | None:
        raw = read_trusted(self.root, self.folder / f"{key}.json", _WHAT)
        if raw is None:
            return None
        try:
            data = json.loads(raw)
            if data["format"] != FORMAT or data["key"] != key or sorted(data["files"]) != sorted(files):
                return None
            return [_result(entry, files) for entry in data["results"]]
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None

    def put(self, key: str, results: Sequence[FileResult]) -> None:
        data = {
            "format": FORMAT,
            "key": key,
            "files": sorted(r.path for r in results),
            "results": [_entry(r) for r in results],
        }
        try:
            private_folder(self.folder)
            if not trusted_folder(self.root, self.folder, _WHAT):
                return  # another user's folder, or one others can write: nothing of ours goes there
            fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=f".{key}.")  # 0600
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    f.write(json.dumps(data, separators=(",", ":")))  # the C encoder: dump() streams in Python
                os.replace(tmp, self.folder / f"{key}.json")
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
            self._prune()
        except OSError:
            pass

    def _prune(self) -> None:
        entries = sorted(self.folder.glob("[!.]*.json"), key=lambda p: p.stat().st_mtime_ns, reverse=True)
        # A temporary file a killed run left behind (older than any write in progress).
        abandoned = [p for p in self.folder.glob(".*") if time.time() - p.stat().st_mtime > 3600]
        for stale in [*entries[KEEP:], *abandoned]:
            with contextlib.suppress(OSError):
                stale.unlink()


_WHAT = "the plan cache"


def _entry(r: FileResult) -> dict[str, Any]:
    return {
        "path": r.path,
        "status": r.status.value,
        "after": base64.b64encode(r.after).decode("ascii") if r.after != r.before else None,
        "reason": r.reason,
        "sites": [[s.rule_id, s.path, s.line, s.end_line, s.callee, s.action.value, s.message, s.guarded,
                   list(s.moves), s.by] for s in r.sites],
    }


def _result(entry: dict[str, Any], files: Mapping[str, bytes]) -> FileResult:
    path = entry["path"]
    before = files[path]
    after = before if entry["after"] is None else base64.b64decode(entry["after"], validate=True)
    sites = tuple(Site(str(rule), str(p), int(line), int(end), str(callee), Action(action), str(message), bool(g),
                       tuple(str(m) for m in moves), str(by))
                  for rule, p, line, end, callee, action, message, g, moves, by in entry["sites"])
    return FileResult(path, FileStatus(entry["status"]), before, after, sites, str(entry["reason"]))

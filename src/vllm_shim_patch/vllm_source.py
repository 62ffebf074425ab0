"""One reader of vLLM's source: a folder that holds `vllm/` (site-packages, a checkout) or a vLLM
wheel, opened in one place and closed when done; how a relative import resolves; and the
`module:Class.method` scope string. Standard library only, so the version check and the rule
loader can use it without the engine.

Every other module that reads vLLM's files asks here: the version a source carries
(`versions.py`), the static signature reader (`signatures/static/names.py`), the existence and
relocation checks (`signatures/static/members.py`).
"""

from __future__ import annotations

import ast
import os
import stat
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType

__all__ = ["LISTING", "Stamp", "VllmSource", "listing", "parse_scope", "resolve_relative", "stamp", "unwrap_annotation"]

Stamp = tuple  # ("f", size, mtime_ns) | ("d", 0, 0) | ("l", 0, mtime_ns)
# A key ending so in a record of paths read stands for a directory's list of entries.
LISTING = "/*"


class VllmSource:
    """The files of a vLLM source, by their paths relative to it ("vllm/v1/request.py").

    A wheel is opened once, here, and closed by `close` (or the `with` block); a folder is read
    path by path. Raises OSError or zipfile.BadZipFile when `root` cannot be opened."""

    def __init__(self, root: Path | str):
        self.root = Path(root)
        self._zip: zipfile.ZipFile | None = None
        self._names: list[str] = []
        self._name_set: set[str] = set()
        self._dirs: set[str] = set()
        if self.root.is_file():
            self._zip = zipfile.ZipFile(self.root)
            self._names = self._zip.namelist()
            self._name_set = set(self._names)
            for name in self._names:
                parts = name.split("/")[:-1]
                self._dirs.update("/".join(parts[:i]) for i in range(1, len(parts) + 1))

    @property
    def is_wheel(self) -> bool:
        return self._zip is not None

    @property
    def closed(self) -> bool:
        """Whether a wheel's zip was closed (a folder has nothing to close: False)."""
        return self._zip is not None and self._zip.fp is None

    def close(self) -> None:
        if self._zip is not None:
            self._zip.close()

    def __enter__(self) -> VllmSource:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # -- one path ------------------------------------------------------------------------------

    def read(self, rel: str) -> bytes | None:
        """The bytes of file `rel`, None when there is no such file."""
        return self.read_stamped(rel)[0]

    def read_stamped(self, rel: str) -> tuple[bytes | None, Stamp | None]:
        """The bytes of file `rel` (None: no such file) and, in a folder, its stamp (what the
        signature cache compares: absent paths included; a wheel's own stamp stands for its files)."""
        if self._zip is not None:
            return (self._zip.read(rel) if rel in self._name_set else None), None
        path = self.root / rel
        seen = stamp(path)
        return (path.read_bytes() if seen is not None and seen[0] == "f" else None), seen

    def is_dir(self, rel: str) -> tuple[bool, Stamp | None]:
        """Whether `rel` is a directory, and (in a folder) its stamp."""
        if self._zip is not None:
            return rel in self._dirs, None
        seen = stamp(self.root / rel)
        return seen is not None and seen[0] == "d", seen

    # -- many paths ------------------------------------------------------------------------------

    def names(self) -> list[str]:
        """Every file of a wheel, in the zip's order (a folder: [], use `walk`)."""
        return list(self._names)

    def sources(self, package: str = "vllm", where: Callable[[str], bool] | None = None
                ) -> Iterator[tuple[str, bytes]]:
        """(path, bytes) of every `.py` file under `package/` whose path `where` accepts (all
        without it; only those are read): a wheel's in the zip's order, a folder's sorted by path
        (as `rglob` finds them: symlinked folders not entered)."""
        if self._zip is not None:
            for name in self._names:
                if name.startswith(f"{package}/") and name.endswith(".py") and (where is None or where(name)):
                    yield name, self._zip.read(name)
            return
        for path in sorted((self.root / package).rglob("*.py")):
            rel = path.relative_to(self.root).as_posix()
            if where is None or where(rel):
                yield rel, path.read_bytes()

    def walk(self, package: str = "vllm") -> Iterator[tuple[str, list[str], list[str]]]:
        """A folder's `os.walk` under `package/` as (relative dir, subdirs, files), `__pycache__`
        left out (nothing in it is importable, and its listing changes whenever bytecode is
        written); a wheel's files are in `names`."""
        if self._zip is not None:
            return
        for dirpath, dirnames, filenames in os.walk(self.root / package):
            dirnames[:] = [d for d in dirnames if d != "__pycache__"]
            yield Path(dirpath).relative_to(self.root).as_posix(), dirnames, filenames

    def dist_info(self, name: str) -> list[str]:
        """The path of file `name` in every `vllm-*.dist-info`: a wheel's that it holds, in the
        zip's order; a folder's sorted, whether or not the file is there (a RECORD may appear)."""
        if self._zip is not None:
            return [n for n in self._names if n.startswith("vllm-") and n.count("/") == 1
                    and n.split("/")[0].endswith(".dist-info") and n.endswith(f"/{name}")]
        return sorted(f"{p.name}/{name}" for p in self.root.glob("vllm-*.dist-info"))


def stamp(path: Path) -> Stamp | None:
    """What tells whether a path changed: kind, size and mtime."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    if stat.S_ISDIR(st.st_mode):
        return ("d", 0, 0)
    return ("f", st.st_size, st.st_mtime_ns) if stat.S_ISREG(st.st_mode) else None


def listing(path: Path) -> Stamp | None:
    """What tells whether a directory's entries changed (one was added, removed or renamed): its
    mtime. For an answer that depends on what a walk found, e.g. that no compiled module exists."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return ("l", 0, st.st_mtime_ns) if stat.S_ISDIR(st.st_mode) else None


def resolve_relative(package: str, level: int, name: str | None = None) -> str | None:
    """importlib's resolution of `from <level dots><name> import ...` in a module of `package`
    (a package's own `__init__` is in the package itself): the absolute module name, or None when
    the dots climb above the top package."""
    if not level:
        return name or ""
    parts = package.split(".") if package else []
    if level - 1 >= len(parts):
        return None
    base = ".".join(parts[: len(parts) - (level - 1)])
    return f"{base}.{name}" if name else base


def parse_scope(text: str) -> tuple[str, tuple[str, ...]]:
    """`module:Class.method` -> ("module", ("Class", "method")); `module` -> ("module", ())."""
    module, _, inner = text.partition(":")
    return module, tuple(inner.split(".")) if inner else ()


def unwrap_annotation(node: ast.expr | None) -> ast.expr | None:
    """`X`, `"X"`, `Optional[X]`, `X | None` -> X; anything else -> None."""
    if node is None:
        return None
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        try:
            node = ast.parse(node.value, mode="eval").body
        except SyntaxError:
            return None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        sides = [s for s in (node.left, node.right) if not (isinstance(s, ast.Constant) and s.value is None)]
        return unwrap_annotation(sides[0]) if len(sides) == 1 else None
    if isinstance(node, ast.Subscript):
        head = node.value
        name = head.attr if isinstance(head, ast.Attribute) else head.id if isinstance(head, ast.Name) else ""
        if name == "Optional":
            return unwrap_annotation(node.slice)
        return None
    return node if isinstance(node, (ast.Name, ast.Attribute)) else None

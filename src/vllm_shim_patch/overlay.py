"""The git overlay: a repository outside site-packages whose work tree is the installed package.

Layout of one overlay folder (``<state>/vllm-shim-patch/<dist>-<hash of location>/``):

- ``git/``        the repository (``git --git-dir <overlay>/git log`` works as is)
- ``state.json``  the tracked files and their hashes at ``original`` and at HEAD, so ``status``
                  answers without git
- ``journal.json`` present only while files are being written: what the next command must
                  finish or undo after a crash
- ``lock``        held (flock) by the one process working on this package
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import __version__
from .errors import LockedError, OverlayError
from .faults import checkpoint
from .fsutil import (
    atomic_write,
    hash_file,
    read_json,
    remove_stale_bytecode,
    remove_temp_files,
    write_json,
)

STATE_FORMAT = 1


def state_root(state_dir: str | None) -> Path:
    if state_dir:
        return Path(state_dir).expanduser()
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "vllm-shim-patch"


def overlay_path(root: Path, package: str, location: Path) -> Path:
    digest = hashlib.sha256(str(location).encode()).hexdigest()[:12]
    return root / f"{package.lower().replace('_', '-')}-{digest}"


def tracked_paths(record_paths: Iterable[str]) -> list[str]:
    """The files of the distribution the overlay records: RECORD minus bytecode and outside paths."""
    return sorted(
        p for p in record_paths
        if not p.startswith("..") and not p.startswith("/") and "__pycache__/" not in p and not p.endswith(".pyc")
    )


@dataclass(frozen=True)
class State:
    """state.json: what the overlay last recorded (a cache of git, rebuilt by each command)."""

    data: dict[str, Any]

    @property
    def head(self) -> dict[str, str | None]:
        return dict(self.data["head"])

    @property
    def original(self) -> dict[str, str | None]:
        return dict(self.data["original"])

    @property
    def files(self) -> list[str]:
        return list(self.data["files"])


class Overlay:
    def __init__(self, path: Path, work_tree: Path):
        self.path = path
        self.work_tree = work_tree
        self.gitdir = path / "git"
        self.state_file = path / "state.json"
        self.journal_file = path / "journal.json"
        self.lock_file = path / "lock"
        self._lock_fd: int | None = None

    # ---------------------------------------------------------------- git through one helper

    def git(self, *args: str, repo: bool = True) -> str:
        """Run git on this overlay; any failure is an OverlayError carrying git's own words."""
        return self._run(list(args), repo, None).decode("utf-8", errors="replace")

    def git_bytes(self, *args: str, stdin: str) -> bytes:
        return self._run(list(args), True, stdin)

    def _run(self, args: list[str], repo: bool, stdin: str | None, extra_env: dict[str, str] | None = None) -> bytes:
        if shutil.which("git") is None:
            raise OverlayError("git executable not found: install git (e.g. apt-get install git) and run again")
        os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")
        for key in [k for k in os.environ if k.startswith("GIT_") and not k.startswith("GIT_PYTHON_")]:
            # GitPython passes our environment on: a caller's GIT_DIR or GIT_INDEX_FILE (say, from
            # a git hook) would point our commands at someone else's repository.
            del os.environ[key]
        import git as gitpython

        env = {
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_AUTHOR_NAME": "vllm-shim-patch",
            "GIT_AUTHOR_EMAIL": "vllm-shim-patch@localhost",
            "GIT_COMMITTER_NAME": "vllm-shim-patch",
            "GIT_COMMITTER_EMAIL": "vllm-shim-patch@localhost",
            "GIT_LITERAL_PATHSPECS": "1",
            "LC_ALL": "C",
            **(extra_env or {}),
        }
        where = [f"--git-dir={self.gitdir}", f"--work-tree={self.work_tree}"] if repo else []
        command = ["git", *where, "-c", "safe.directory=*", *args]
        try:
            with tempfile.TemporaryFile() as feed:
                if stdin is not None:
                    feed.write(stdin.encode())
                    feed.seek(0)
                out = gitpython.Git().execute(command, env=env, istream=feed if stdin is not None else None,
                                              strip_newline_in_stdout=False, stdout_as_string=False)
        except gitpython.GitCommandError as exc:
            detail = re.sub(r"^\s*(stderr|stdout): '|'\s*$", "", str(exc.stderr or exc.stdout or "")).strip()
            raise OverlayError(
                f"git {args[0]} failed in the overlay {self.path}: {detail or exc}"
                f" (if the overlay is damaged, move it away and run again)"
            ) from None
        return bytes(out)

    def exists(self) -> bool:
        return self.gitdir.is_dir()

    def head_commit(self) -> str | None:
        if not self.exists():
            return None
        try:
            return self.git("rev-parse", "--verify", "-q", "HEAD").strip() or None
        except OverlayError:
            return None

    def resolve(self, ref: str) -> str:
        try:
            return self.git("rev-parse", "--verify", "-q", f"{ref}^{{commit}}").strip()
        except OverlayError:
            raise OverlayError(f"no state {ref!r} in the overlay (see `patch-speculators log`)") from None

    def tree_files(self, commit: str, paths: Iterable[str]) -> dict[str, bytes | None]:
        """The bytes `commit` holds for each path (None: not in that commit), in one git process."""
        paths = list(paths)
        if not paths:
            return {}
        raw = self.git_bytes("cat-file", "--batch", stdin="".join(f"{commit}:{p}\n" for p in paths))
        out: dict[str, bytes | None] = {}
        pos = 0
        for path in paths:
            end = raw.index(b"\n", pos)
            header = raw[pos:end].split()
            pos = end + 1
            if len(header) == 3 and header[1] == b"blob":
                size = int(header[2])
                out[path] = raw[pos : pos + size]
                pos += size + 1
            else:
                out[path] = None
        return out

    # ---------------------------------------------------------------- lock

    @contextlib.contextmanager
    def locked(self, wait: bool = False) -> Iterator[None]:
        """One process at a time; the kernel drops a flock when its holder dies, so none goes stale."""
        self.path.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.lock_file, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
                raise LockedError(
                    f"another patch-speculators (pid {holder}) is working on this package; "
                    f"wait for it or run again with --wait"
                ) from None
            os.ftruncate(fd, 0)
            os.pwrite(fd, str(os.getpid()).encode(), 0)
            yield
        finally:
            os.close(fd)

    # ---------------------------------------------------------------- state and journal

    def state(self) -> State | None:
        data = read_json(self.state_file)
        return State(data) if data else None

    def save_state(self, **data: Any) -> None:
        write_json(self.state_file, {"format": STATE_FORMAT, "tool": __version__, **data})

    def journal(self) -> dict[str, Any] | None:
        data = read_json(self.journal_file)
        return data if isinstance(data, dict) else None

    # ---------------------------------------------------------------- creation and commits

    def create(self, files: list[str], message: str, meta: dict[str, Any]) -> str:
        """A new overlay whose first commit is the files as they are; built aside, then renamed in."""
        if shutil.which("git") is None:
            raise OverlayError("git executable not found: install git (e.g. apt-get install git) and run again")
        self.path.mkdir(parents=True, exist_ok=True)
        for stale in self.path.glob("git.partial-*"):
            shutil.rmtree(stale, ignore_errors=True)  # an earlier create that was killed
        tmp = self.path / f"git.partial-{os.getpid()}"
        final, self.gitdir = self.gitdir, tmp
        try:
            self.git("init", "-q", "--bare", str(tmp), repo=False)
            hooks = self.path / "no-hooks"
            hooks.mkdir(exist_ok=True)
            for key, value in (
                ("core.bare", "false"),
                ("core.worktree", str(self.work_tree)),
                ("core.autocrlf", "false"),
                ("core.hooksPath", str(hooks)),
                ("core.fsync", "objects,derived-metadata,reference"),
                ("commit.gpgsign", "false"),
                ("tag.gpgsign", "false"),
                ("gc.auto", "0"),
                ("user.name", "vllm-shim-patch"),
                ("user.email", "vllm-shim-patch@localhost"),
            ):
                self.git("config", key, value)
            checkpoint("overlay:init")
            commit = self.commit(files, message, tag="original")
        except BaseException:
            self.gitdir = final
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        self.gitdir = final
        os.replace(tmp, final)
        checkpoint("overlay:created")
        return commit

    def commit(self, files: Iterable[str], message: str, tag: str | None = None, allow_empty: bool = False) -> str:
        spec = self.path / "pathspec"
        spec.write_text("".join(f"{p}\n" for p in files))
        # -A with the explicit list: deletions of listed files are recorded, nothing else is looked at.
        self.git("add", "-A", "-f", f"--pathspec-from-file={spec}")
        checkpoint("git:added")
        args = ["commit", "-q", "--no-verify", "-m", message]
        if allow_empty:
            args.append("--allow-empty")
        self.git(*args)
        checkpoint("git:committed")
        commit = self.git("rev-parse", "HEAD").strip()
        if tag:
            self.git("tag", "-f", tag, commit)
            checkpoint("git:tagged")
        return commit

    def commit_tree(self, base: str, replace: Mapping[str, bytes], message: str, tag: str | None = None) -> str:
        """Commit `base`'s tree with some files replaced, on top of HEAD, without touching the work tree."""
        index = self.path / "index.partial"
        blob = self.path / "blob.partial"
        env = {"GIT_INDEX_FILE": str(index)}
        try:
            self._run(["read-tree", base], True, None, env)
            for path, data in sorted(replace.items()):
                blob.write_bytes(data)
                sha = self.git("hash-object", "-w", "--", str(blob)).strip()
                self._run(["update-index", "--add", "--cacheinfo", f"100644,{sha},{path}"], True, None, env)
            tree = self._run(["write-tree"], True, None, env).decode().strip()
            commit = self.git("commit-tree", tree, "-p", "HEAD", "-m", message).strip()
            self.git("update-ref", "HEAD", commit)
            checkpoint("git:committed-tree")
            if tag:
                self.git("tag", "-f", tag, commit)
        finally:
            for leftover in (index, blob):
                leftover.unlink(missing_ok=True)
        return commit

    def reset_index(self) -> None:
        """After a crash: drop git's stale index lock (we hold our own lock) and resync the index."""
        with contextlib.suppress(FileNotFoundError):
            (self.gitdir / "index.lock").unlink()
        if self.head_commit():
            self.git("reset", "-q")

    # ---------------------------------------------------------------- writing the work tree

    def write_files(self, op: str, writes: Mapping[str, bytes], base_commit: str, **extra: Any) -> None:
        """Journal first, then each file atomically; the journal says how to finish or undo."""
        from .fsutil import record_hash

        journal = {
            "op": op,
            "pid": os.getpid(),
            "started": time.time(),
            "base_commit": base_commit,
            "files": {p: {"before": hash_file(self.work_tree / p), "after": record_hash(writes[p])}
                      for p in sorted(writes)},
            **extra,
        }
        write_json(self.journal_file, journal)
        checkpoint(f"{op}:journal")
        for path in sorted(writes):
            target = self.work_tree / path
            atomic_write(target, writes[path])
            remove_stale_bytecode(target)
            checkpoint(f"{op}:wrote {path}")

    def restore(self, commit: str, paths: Iterable[str],
                expect: Mapping[str, set[str | None]] | None = None) -> tuple[list[str], list[str]]:
        """Write back the bytes `commit` holds for `paths` where the files differ.

        With `expect`, a file whose current hash is not one it lists was changed by someone else
        since: it is left alone and returned as skipped. Returns (restored, skipped).
        """
        from .fsutil import record_hash

        wanted = self.tree_files(commit, paths)
        changed, skipped = [], []
        for path, data in sorted(wanted.items()):
            target = self.work_tree / path
            remove_temp_files(target.parent)
            if data is None:
                continue
            current = hash_file(target)
            if current == record_hash(data):
                continue
            if expect is not None and current not in expect.get(path, set()):
                skipped.append(path)
                continue
            atomic_write(target, data)
            remove_stale_bytecode(target)
            changed.append(path)
            checkpoint(f"restore:wrote {path}")
        return changed, skipped

    def tag_points_at(self, tag: str) -> str | None:
        try:
            return self.git("rev-parse", "--verify", "-q", f"refs/tags/{tag}^{{commit}}").strip() or None
        except OverlayError:
            return None

    def clear_journal(self) -> None:
        checkpoint("journal:clearing")
        with contextlib.suppress(FileNotFoundError):
            self.journal_file.unlink()

"""The git overlay: a repository outside site-packages whose work tree is the installed package.

All git runs through `Overlay._run`; the on-disk layout is `layout.py`'s, the lock `lock.py`'s.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from .. import __version__
from ..errors import GitMissingError, OverlayError, StateDirError, UnsafeWriteError
from ..faults import checkpoint
from ..fsutil import (
    atomic_write,
    hash_file,
    linked_part,
    plain_relative,
    record_hash,
    remove_stale_bytecode,
    remove_temp_files,
    write_json,
    write_private,
)
from .layout import GIT_DIR, JOURNAL_FILE, LOCK_FILE, STATE_FILE, STATE_FORMAT, State, read_journal, read_state
from .lock import hold, open_lock

# Given on every git command line, so they win over any config file: no hook and no fsmonitor
# ever runs, whatever the overlay's config says (git's own `safe.directory` spirit, stricter).
_GIT_OVERRIDES = tuple(arg for setting in ("safe.directory=*", f"core.hooksPath={os.devnull}", "core.fsmonitor=false",
                                            "core.untrackedCache=false", "protocol.allow=never",
                                            f"core.attributesFile={os.devnull}")
                       for arg in ("-c", setting))
_NO_GIT = "git executable not found: install git (e.g. apt-get install git) and run again"


class Overlay:
    def __init__(self, path: Path, work_tree: Path, allowed: Iterable[str] | None = None):
        self.path = path
        self.work_tree = work_tree
        # The only paths the overlay may write in the work tree (the RECORD's files); None: not checked.
        self.allowed = frozenset(allowed) if allowed is not None else None
        self.gitdir = path / GIT_DIR
        self.state_file = path / STATE_FILE
        self.journal_file = path / JOURNAL_FILE
        self.lock_file = path / LOCK_FILE

    # ---------------------------------------------------------------- git through one helper

    def git(self, *args: str, repo: bool = True) -> str:
        """Run git on this overlay; any failure is an OverlayError carrying git's own words."""
        return self._run(list(args), repo, None).decode("utf-8", errors="replace")

    def git_bytes(self, *args: str, stdin: str) -> bytes:
        return self._run(list(args), True, stdin)

    def _run(self, args: list[str], repo: bool, stdin: str | None, extra_env: dict[str, str] | None = None) -> bytes:
        if shutil.which("git") is None:
            raise GitMissingError(_NO_GIT)
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
            "GIT_ATTR_NOSYSTEM": "1",
            # A refs/replace/ planted in the overlay would make git answer other bytes than the
            # objects the integrity check verified.
            "GIT_NO_REPLACE_OBJECTS": "1",
            "LC_ALL": "C",
            **(extra_env or {}),
        }
        where = [f"--git-dir={self.gitdir}", f"--work-tree={self.work_tree}"] if repo else []
        command = ["git", *where, *_GIT_OVERRIDES, *args]
        try:
            with tempfile.TemporaryFile() as feed:
                if stdin is not None:
                    feed.write(stdin.encode("utf-8", "surrogateescape"))
                    feed.seek(0)
                out = gitpython.Git().execute(command, env=env, istream=feed if stdin is not None else None,
                                              strip_newline_in_stdout=False, stdout_as_string=False)
        except gitpython.GitCommandError as exc:
            detail = re.sub(r"^\s*(stderr|stdout): '|'\s*$", "", str(exc.stderr or exc.stdout or "")).strip()
            full = any(word in detail for word in ("No space left on device", "Disk quota exceeded", "Out of diskspace"))
            hint = ("the state dir's disk is full: free space and run again" if full
                    else "if the overlay is damaged, move it away and run again")
            raise OverlayError(f"git {args[0]} failed in the overlay {self.path}: {detail or exc} ({hint})") from None
        return bytes(out)

    def exists(self) -> bool:
        return self.gitdir.is_dir()

    def head_commit(self) -> str | None:
        if not self.exists():
            return None
        try:
            return self.git("rev-parse", "--verify", "-q", "HEAD").strip() or None
        except GitMissingError:
            raise
        except OverlayError:
            return None

    def resolve(self, ref: str) -> str:
        try:
            return self.git("rev-parse", "--verify", "-q", f"{ref}^{{commit}}").strip()
        except GitMissingError:
            raise
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
        """One process at a time on this package (see `lock.hold`). Nothing the run writes is
        group- or other-writable; a run that recorded nothing leaves no folder and no lock behind."""
        old_umask = os.umask(0o022)
        os.umask(old_umask | 0o022)
        made: list[Path] = []
        try:
            try:
                made = _make_folders(self.path)
                # The lock file is the overlay's first write: a state dir we cannot write fails here.
                os.close(open_lock(self.lock_file))
            except OSError as exc:
                raise StateDirError(
                    f"cannot write the state dir {self.path.parent}: {exc.strerror or exc}; nothing was changed "
                    f"(pass --state-dir with a writable folder)"
                ) from None
            with hold(self.lock_file, wait):
                try:
                    yield
                finally:
                    if made and not os.path.lexists(self.gitdir):
                        self._discard()
        finally:
            os.umask(old_umask)
            if made and not os.path.lexists(self.gitdir):
                for folder in reversed(made):
                    with contextlib.suppress(OSError):
                        folder.rmdir()

    def _discard(self) -> None:
        """What a run that recorded nothing wrote in a folder it made: its lock and scratch files."""
        for name in (LOCK_FILE, "pathspec", "blob.partial", "index.partial"):
            with contextlib.suppress(FileNotFoundError):
                (self.path / name).unlink()

    # ---------------------------------------------------------------- state and journal

    def state(self) -> State | None:
        return read_state(self.path)

    def save_state(self, **data: Any) -> None:
        write_json(self.state_file, {"format": STATE_FORMAT, "tool": __version__, **data})

    def journal(self) -> dict[str, Any] | None:
        return read_journal(self.path)

    # ---------------------------------------------------------------- creation and commits

    def create(self, files: list[str], message: str, replace: Mapping[str, bytes] | None = None,
               local: str | None = None) -> str:
        """A new overlay whose first commit is the files as they are (`replace`: some of them with
        other bytes, the work tree untouched), and with `local` a second commit of the files as
        they are, tagged `local`; built aside, then renamed in, so a killed run leaves no overlay
        rather than an `original` without the user's edits on top."""
        if shutil.which("git") is None:
            raise GitMissingError(_NO_GIT)
        self.path.mkdir(parents=True, exist_ok=True)
        for stale in self.path.glob("git.partial-*"):
            shutil.rmtree(stale, ignore_errors=True)  # an earlier create that was killed
        tmp = self.path / f"git.partial-{os.getpid()}"
        final, self.gitdir = self.gitdir, tmp
        try:
            self.git("init", "-q", "--bare", "--template=", str(tmp), repo=False)
            for key, value in (
                ("core.bare", "false"),
                ("core.worktree", str(self.work_tree)),
                ("core.autocrlf", "false"),
                ("core.hooksPath", os.devnull),
                ("core.fsync", "objects,derived-metadata,reference"),
                ("commit.gpgsign", "false"),
                ("tag.gpgsign", "false"),
                ("gc.auto", "0"),
                ("user.name", "vllm-shim-patch"),
                ("user.email", "vllm-shim-patch@localhost"),
            ):
                self.git("config", key, value)
            checkpoint("overlay:init")
            commit = self.commit(files, message, tag="original", replace=replace)
            if local is not None:
                self.commit(files, local, tag="local")
        except BaseException:
            self.gitdir = final
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        self.gitdir = final
        os.replace(tmp, final)
        checkpoint("overlay:created")
        return commit

    def commit(self, files: Iterable[str], message: str, tag: str | None = None, allow_empty: bool = False,
               replace: Mapping[str, bytes] | None = None) -> str:
        """Commit the listed files as the work tree has them (`replace`: these with other bytes)."""
        spec = self.path / "pathspec"
        write_private(spec, "".join(f"{p}\n" for p in files).encode("utf-8", "surrogateescape"))
        # -A with the explicit list: deletions of listed files are recorded, nothing else is looked at.
        self.git("add", "-A", "-f", f"--pathspec-from-file={spec}")
        checkpoint("git:added")
        if replace:
            self._stage(replace)
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
        self.check_writes(replace)
        try:
            with contextlib.suppress(FileNotFoundError):
                index.unlink()
            self._run(["read-tree", base], True, None, env)
            for path, data in sorted(replace.items()):
                write_private(blob, data)
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

    def _stage(self, replace: Mapping[str, bytes]) -> None:
        """Put `replace`'s bytes in the index in place of the work tree's, keeping each file's mode."""
        self.check_writes(replace)
        blob = self.path / "blob.partial"
        try:
            for path, data in sorted(replace.items()):
                staged = self.git("ls-files", "-s", "--", path).split()
                mode = staged[0] if staged else "100644"  # a file the user deleted: pip writes 0644
                write_private(blob, data)
                sha = self.git("hash-object", "-w", "--", str(blob)).strip()
                self.git("update-index", "--add", "--cacheinfo", f"{mode},{sha},{path}")
        finally:
            blob.unlink(missing_ok=True)

    def reset_index(self) -> None:
        """After a crash: drop git's stale index lock (we hold our own lock) and resync the index."""
        with contextlib.suppress(FileNotFoundError):
            (self.gitdir / "index.lock").unlink()
        if self.head_commit():
            self.git("reset", "-q")

    # ---------------------------------------------------------------- writing the work tree

    def write_files(self, op: str, writes: Mapping[str, bytes], base_commit: str, **extra: Any) -> None:
        """Journal first, then each file atomically; the journal says how to finish or undo."""
        self.check_writes(writes)
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
        paths = list(paths)
        self.check_writes(paths)
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

    def check_writes(self, paths: Iterable[str]) -> None:
        """Before the first write: every path is one RECORD lists, plain, and reached through no link."""
        for path in sorted(paths):
            why = None
            if not plain_relative(path):
                why = "it is not a plain path inside the package"
            elif self.allowed is not None and path not in self.allowed:
                why = "the package's RECORD does not list it"
            else:
                link = linked_part(self.work_tree, path)
                if link is not None:
                    why = f"{link} is a symbolic link"
            if why:
                raise UnsafeWriteError(f"refusing to write {self.work_tree / path}: {why}; nothing was written "
                                       f"(if the overlay names it, it was changed outside this tool: move "
                                       f"{self.path} away and run again)")

    def tag_points_at(self, tag: str) -> str | None:
        try:
            return self.git("rev-parse", "--verify", "-q", f"refs/tags/{tag}^{{commit}}").strip() or None
        except GitMissingError:
            raise
        except OverlayError:
            return None

    def clear_journal(self) -> None:
        checkpoint("journal:clearing")
        with contextlib.suppress(FileNotFoundError):
            self.journal_file.unlink()


def _make_folders(path: Path) -> list[Path]:
    """Create `path` and its missing parents; the ones made, outermost first."""
    missing = []
    current = path
    while not os.path.lexists(current) and current != current.parent:
        missing.append(current)
        current = current.parent
    path.mkdir(parents=True, exist_ok=True)
    return list(reversed(missing))

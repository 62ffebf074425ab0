"""What every command shares: the outcome type, and a context that loads things once.

`Context` loads the target, the rules, the overlay, the original bytes and the signatures on
first use and keeps them, so a command is a few named steps over it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from ..errors import TargetError
from ..settings import Log, Settings, SignatureKind, quiet

if TYPE_CHECKING:
    from ..overlay.repo import Overlay
    from ..rewrite.plan import Plan
    from ..rules.model import RulePack
    from ..target import Target


@dataclass
class Outcome:
    """What a command returns: a line (or lines) for a human, data for --json, the exit code."""

    text: str
    data: Any = field(default_factory=dict)  # a JSON object, or a list for the listing commands
    exit_code: int = 0

    # Lines for stderr (progress, the summary under a diff) that the CLI prints before `text`.
    log: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def with_log(self, *lines: str) -> Outcome:
        return Outcome(self.text, self.data, self.exit_code, (*self.log, *lines))


class Context:
    def __init__(self, settings: Settings, log: Log = quiet):
        self.settings = settings
        self.log = log

    @cached_property
    def target(self) -> Target:
        pending = self.__dict__.pop("_probing", None)
        if pending is not None:  # started by start_probe: its answer, or its error, surfaces here
            thread, answer = pending
            thread.join()
            if "error" in answer:
                raise answer["error"]
            return answer["target"]  # type: ignore[no-any-return]
        from ..target import probe

        return probe(self.settings.python, self.settings.package)

    def start_probe(self) -> None:
        """Ask the target interpreter now, in a thread (it waits on a subprocess), and open a
        --vllm-source's reader meanwhile, which does not need the answer: for a command that reads
        `target` (`load` starts here; `audit --no-rules` calls it directly). An
        error of either surfaces where it always did: the probe's at `target`, the reader's at
        `static_source` (it is simply opened again there)."""
        import threading  # not concurrent.futures: 4 ms more to import, for one call

        from ..target import probe

        if "target" in self.__dict__ or "_probing" in self.__dict__:
            return
        answer: dict[str, Any] = {}

        def ask() -> None:
            try:
                answer["target"] = probe(self.settings.python, self.settings.package)
            except BaseException as exc:  # noqa: BLE001  (re-raised in the main thread, at `target`)
                answer["error"] = exc

        thread = threading.Thread(target=ask, name="probe")
        thread.start()
        self.__dict__["_probing"] = (thread, answer)
        if self.settings.vllm_source and "static_source" not in self.__dict__:
            from ..errors import PatchError
            from ..signatures.select import source_reader

            try:
                self.__dict__["static_source"] = source_reader(self.settings.vllm_source)
            except PatchError:
                pass

    @cached_property
    def pack(self) -> RulePack:
        from ..rules.loader import load_pack

        return load_pack(self.settings.rules)

    def load(self, engine: bool = True) -> None:
        """Target and rules for a command that runs the engine: the target interpreter answers
        (`start_probe`) while the rules load and (`engine`) libcst imports here."""
        self.start_probe()
        self.check_package()  # a bad rule file, or a package no rule is for, before the target's answer
        if engine:
            import libcst  # noqa: F401  (the caller runs the engine next)
        self.check_version()
        # The rules read the .py files RECORD lists: without them, "0 edits" would read as patched.
        self.refuse_editable()
        self.refuse_sourceless()

    def check_package(self) -> None:
        """Refuse --package naming a distribution the rules are not for: its files would be
        recorded and called patched with no rule ever looking at them."""
        from ..errors import UsageError
        from ..report.text import listing

        if not self.pack.targets(self.settings.package):
            raise UsageError(f"--package {self.settings.package}: the rules are for "
                             f"{listing(list(self.pack.packages))} only (a rule file's 'package:' "
                             f"names the package it is for); nothing was recorded")

    def check_version(self) -> Any:
        """The vLLM version rules are for; fails on a --vllm-version that contradicts the installed
        vLLM or --vllm-source before anything is read further or written (make_plan resolves it
        again, cheaply)."""
        from ..versions import resolve_version

        return resolve_version(self.settings.vllm_version, self.target.vllm_version, self.target.python,
                               self.source_version)[0]

    @property
    def who(self) -> str:
        return f"{self.target.package} {self.target.version}"

    @cached_property
    def overlay(self) -> Overlay:
        from ..overlay.integrity import check_overlay
        from ..overlay.layout import overlay_for
        from ..overlay.repo import Overlay

        path = overlay_for(self.settings.state_dir, self.target.package, self.target.location)
        # Before anything reads or writes it: a damaged overlay must not pass for "already patched".
        check_overlay(path, self.target.package, self.target.version)
        return Overlay(path, self.target.location)

    @cached_property
    def tracked(self) -> list[str]:
        """The distribution's files the overlay records."""
        from ..overlay.layout import tracked_paths

        return tracked_paths(e.path for e in self.target.record)

    def installed(self) -> dict[str, bytes]:
        """The bytes of the package's .py files as they are now (a file RECORD names but that is
        gone or unreadable is left out)."""
        out = {}
        for path in self.target.python_files():
            try:
                out[path] = (self.target.location / path).read_bytes()
            except OSError:
                continue
        return out

    def originals(self) -> dict[str, bytes]:
        """The original bytes of the package's .py files (read anew: a baseline may just have moved)."""
        from ..overlay.baseline import original_bytes

        return original_bytes(self.overlay, self.target, self.target.python_files())

    @cached_property
    def guard(self) -> tuple[dict[str, Any] | None, SignatureKind | None]:
        """The installed vLLM's signatures of every rule callee (None: unguarded), and their kind."""
        source = self._guard_source
        if source is None:
            return None, None
        rules = self.pack.rules
        calls = {c for r in rules for c in r.calls} | {c for r in rules for c, _ in r.guard.accepts}
        return source.get_many(sorted(calls)), SignatureKind(source.kind)

    @cached_property
    def facts(self) -> dict[str, bool | None] | None:
        """Whether the class attributes scoped rules' guards name exist in the installed vLLM."""
        source = self._guard_source
        if source is None:
            return None
        names = sorted({n for r in self.pack.rules for n in (*r.guard.defines, *r.guard.lacks)})
        return {n: source.defines(n) for n in names}

    @cached_property
    def _guard_source(self) -> Any:
        if self.settings.no_guard:
            return None
        return self.static_source

    @cached_property
    def static_source(self) -> Any:
        """vLLM's source read statically (--vllm-source, else the installed vLLM's), or None."""
        from ..signatures.select import guard_source

        return guard_source(self.target, self.settings.vllm_source)

    @property
    def live(self) -> bool:
        """Whether calls bind against the live vLLM (unless --static or --vllm-source)."""
        from ..signatures.select import wants_live

        return wants_live(self.target, vllm_source=self.settings.vllm_source, static=self.settings.static)

    def bindings(self, callees: set[str], probe: dict[str, Any] | None = None
                 ) -> tuple[dict[str, Any], SignatureKind | None, str]:
        """Signatures to bind calls against (`probe`: the live answer, already asked)."""
        from ..signatures.select import binding_signatures

        if self.settings.vllm_source or (self.settings.static and self.target.vllm_location is not None):
            # The source the guards already read: one parse of each vLLM module per run.
            return self.static_source.get_many(sorted(callees)), SignatureKind.STATIC, ""
        return binding_signatures(self.target, callees, vllm_source=self.settings.vllm_source,
                                  static=self.settings.static, probe=probe)

    def plan(self, files: dict[str, bytes] | None = None,
             declined: frozenset[tuple[str, int, str]] = frozenset(), reuse: bool = False) -> Plan:
        """What apply would write, computed from the original bytes (or `files`). Every plan is
        kept in the plan cache; `reuse` (a command that writes nothing) takes it from there when
        nothing it depends on changed."""
        from ..rewrite.plan import make_plan

        # libcst imports while the target answers, unless the plan may come from the cache.
        self.load(engine=not reuse or self.plan_cache is None or self.plan_cache.empty)
        signatures, kind = self.guard
        return make_plan(self.target, self.pack, self.settings.vllm_version, signatures, kind,
                         files=self.originals() if files is None else files, declined=declined,
                         facts=self.facts, source=self.source_version, cache=self.plan_cache, reuse=reuse)

    @cached_property
    def plan_cache(self) -> Any:
        """The plan cache under the tool's cache folder (beside the signature cache), or None."""
        from ..rewrite.plancache import PlanCache
        from ..signatures.static.cache import default_cache_dir

        folder = default_cache_dir()
        return PlanCache(folder) if folder is not None else None

    @cached_property
    def source_version(self) -> tuple[str, str | None] | None:
        """--vllm-source and the version it carries (None without --vllm-source)."""
        import zipfile
        from pathlib import Path

        from ..errors import UsageError
        from ..versions import source_version

        if not self.settings.vllm_source:
            return None
        path = Path(self.settings.vllm_source).expanduser()
        if not path.is_dir() and not (path.is_file() and zipfile.is_zipfile(path)):
            what = "no such file or folder" if not path.exists() else "neither a folder nor a wheel"
            raise UsageError(f"--vllm-source {path}: {what} (give vLLM's source folder or its wheel)")
        return str(path), source_version(path)

    # ------------------------------------------------------------------ shared checks

    def refuse_editable(self) -> None:
        if self.target.editable:
            raise TargetError(
                f"{self.target.package} is installed in editable mode from {self.target.editable}: "
                f"patch that source checkout with git instead"
            )

    def refuse_sourceless(self) -> None:
        t = self.target
        if t.python_files():
            return
        compiled = [e.path for e in t.record if e.path.endswith(".pyc") and "__pycache__/" not in e.path]
        if compiled:
            raise TargetError(
                f"{t.package} {t.version} in {t.location} is installed without its source (RECORD lists "
                f"{len(compiled)} .pyc files and no .py file): the rules rewrite source; reinstall it from "
                f"its wheel (pip install --force-reinstall --no-deps {t.package}=={t.version})"
            )

    def missing_sources(self) -> list[str]:
        """The .py files RECORD lists that are not on disk (deleted, e.g. to ship bytecode only)."""
        return [p for p in self.target.python_files() if not (self.target.location / p).is_file()]

    def unrecorded_sources(self) -> list[str]:
        """.py files in the package's own folders that RECORD does not list: the rules never read them."""
        t = self.target
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

    def unrecorded_with_rules(self) -> list[tuple[str, list[str]]]:
        """The unrecorded .py files a rule would act on, each with the rules (apply skips them)."""
        extra = {}
        for path in self.unrecorded_sources():
            try:
                extra[path] = (self.target.location / path).read_bytes()
            except OSError:
                continue
        if not extra:
            return []
        from ..settings import Action

        plan = self.plan(extra)
        out = []
        for r in plan.results:
            acting = [s.rule_id for s in r.sites if s.action not in (Action.NOT_NEEDED, Action.ALREADY)]
            if r.changed or acting:
                out.append((r.path, list(dict.fromkeys(acting))))
        return out

    def check_mounted_writable(self) -> None:
        """Before the first write (the overlay): a package on a read-only mount cannot be patched at all."""
        try:
            readonly = bool(os.statvfs(self.target.location).f_flag & os.ST_RDONLY)
        except OSError:
            return
        if readonly:
            raise TargetError(
                f"{self.target.location} is on a read-only filesystem: patch {self.target.package} where its "
                f"environment is built (e.g. in the image's Dockerfile); nothing was changed"
            )

    def check_writable(self, paths: list[str]) -> None:
        for path in paths:
            full = self.target.location / path
            if full.is_symlink():
                # A linked install (uv --link-mode=symlink): replacing the link would detach it, and
                # the overlay would record the link, not the bytes RECORD describes.
                raise TargetError(
                    f"{full} is a symbolic link (a linked install?): reinstall {self.target.package} with "
                    f"copied files (e.g. uv --link-mode=copy) to patch it; nothing was changed"
                )
            if not os.access(full.parent, os.W_OK) or (full.exists() and not os.access(full, os.W_OK)):
                raise TargetError(
                    f"cannot write {full} (read-only): run as the owner of that environment; nothing was changed"
                )

"""What every command shares: the outcome type, and a context that loads things once.

`Context` loads the target, the rules, the overlay, the original bytes and the signatures on
first use and keeps them, so a command is a few named steps over it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from ..errors import TargetError, UsageError
from ..settings import Log, Settings, SignatureKind, quiet

if TYPE_CHECKING:
    import threading

    from packaging.version import Version

    from ..overlay.repo import Overlay
    from ..report.diff import Hunk
    from ..rewrite.plan import Plan
    from ..rewrite.plancache import PlanCache
    from ..rules.model import RulePack
    from ..signatures.static import StaticSignatures as StaticSource
    from ..target import Target

# Interactive review: given the hunks, answer the (path, line, rule id) keys declined.
Review = Callable[[list["Hunk"]], set[tuple[str, int, str]]]


@dataclass
class Outcome:
    """What a command returns: a line (or lines) for a human, data for --json, the exit code."""

    text: str
    data: Any = field(default_factory=dict)  # a JSON object, or a list for the listing commands
    exit_code: int = 0
    notes: tuple[str, ...] = ()  # for stderr after the text (a diff's summary), not under --json

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


@dataclass
class _Answer:
    """The probe thread's result: the target, or the error to raise at `Context.target`."""

    target: Target | None = None
    error: BaseException | None = None


class _Unread:
    """vLLM's source not opened yet (None is an answer: no source known)."""


_UNREAD = _Unread()


class Context:
    """The target, rules, overlay and signatures of one run, each loaded on first use and kept.

    `log` says progress on stderr; `review` (interactive apply) is asked which hunks to decline.
    """

    def __init__(self, settings: Settings, log: Log = quiet, review: Review | None = None):
        self.settings = settings
        self.log = log
        self.review = review
        self._target: Target | None = None
        self._probing: tuple[threading.Thread, _Answer] | None = None
        self._static: StaticSource | None | _Unread = _UNREAD
        self._pack: RulePack | None = None
        self._full_pack: RulePack | None = None

    @property
    def target(self) -> Target:
        if self._target is not None:
            return self._target
        pending, self._probing = self._probing, None
        if pending is not None:  # started by start_probe: its answer, or its error, surfaces here
            thread, answer = pending
            thread.join()
            if answer.error is not None:
                raise answer.error
            assert answer.target is not None
            self._target = answer.target
        else:
            from ..target import probe

            self._target = probe(self.settings.python, self.settings.package)
        return self._target

    def start_probe(self) -> None:
        """Ask the target interpreter now, in a thread (it waits on a subprocess), and open a
        --vllm-source's reader meanwhile, which does not need the answer: for a command that reads
        `target` (`load` starts here; `audit --no-rules` calls it directly). An
        error of either surfaces where it always did: the probe's at `target`, the reader's at
        `static_source` (it is simply opened again there)."""
        import threading  # not concurrent.futures: 4 ms more to import, for one call

        from ..target import probe

        if self._target is not None or self._probing is not None:
            return
        answer = _Answer()

        def ask() -> None:
            try:
                answer.target = probe(self.settings.python, self.settings.package)
            except BaseException as exc:  # noqa: BLE001  (re-raised in the main thread, at `target`)
                answer.error = exc

        thread = threading.Thread(target=ask, name="probe")
        thread.start()
        self._probing = (thread, answer)
        if self.settings.vllm_source and isinstance(self._static, _Unread):
            from ..errors import PatchError
            from ..signatures.select import source_reader

            try:
                self._static = source_reader(self.settings.vllm_source)
            except PatchError:
                pass

    @property
    def source_opened(self) -> bool:
        """Whether vLLM's source has been opened (by `start_probe` or `static_source`)."""
        return not isinstance(self._static, _Unread)

    @property
    def pack(self) -> RulePack:
        """The rules this run uses: every loaded rule, less --skip, or only --only's."""
        if self._pack is None:
            full = self.full_pack
            self._pack = full.selected(self.settings.skip, self.settings.only, self.settings.rule_options)
        return self._pack

    @property
    def listed_pack(self) -> RulePack:
        """The rules less --skip, or only --only's, opt-in ones kept whether given or not (`rules
        list`, `rules docs`)."""
        options = frozenset(r.option for r in self.full_pack.rules if r.option is not None)
        return self.full_pack.selected(self.settings.skip, self.settings.only, options)

    @property
    def full_pack(self) -> RulePack:
        """Every loaded rule, --skip and --only not applied (to name a rule a failure needs)."""
        if self._full_pack is None:
            from ..rules.loader import load_pack

            full = load_pack(self.settings.rules)
            for flag, ids in (("--skip", self.settings.skip), ("--only", self.settings.only)):
                unknown = full.unknown(ids)
                if unknown:
                    import difflib

                    known = [r.id for r in full.rules]
                    close = difflib.get_close_matches(unknown[0], known, n=3)
                    hint = (f"did you mean {', '.join(close)}?" if close
                            else f"the rules are {', '.join(known)}")
                    raise UsageError(f"{flag} {unknown[0]!r}: no loaded rule has this id; {hint}")
            options = self.settings.rule_options
            off = [r for r in full.rules if r.id in self.settings.only and r.option is not None
                   and r.option not in options]
            if off:
                raise UsageError(f"--only {off[0].id!r}: the rule runs only with --{off[0].option}")
            self._full_pack = full
        return self._full_pack

    @property
    def skipped(self) -> tuple[str, ...]:
        """The ids of the loaded rules this run leaves out (--skip, or not among --only's); a rule
        whose opt-in was not given is not skipped but off (`not_opted`)."""
        kept = {r.id for r in self.pack.rules}
        return tuple(r.id for r in self.full_pack.rules if r.id not in kept and r.id not in self.not_opted)

    @property
    def not_opted(self) -> tuple[str, ...]:
        """The ids of the loaded rules left out because their opt-in (`option:`) was not given."""
        options = self.settings.rule_options
        return tuple(r.id for r in self.full_pack.rules if r.option is not None and r.option not in options)

    @property
    def loaded_pack(self) -> RulePack | None:
        """The rules if a step has loaded them already (None: not loaded, and not loaded here)."""
        return self._pack

    def load(self, engine: bool = True) -> None:
        """Target and rules for a command that runs the engine: the target interpreter answers
        (`start_probe`) while the rules load and (`engine`) libcst imports here."""
        self.start_probe()
        self.check_package()  # a bad rule file, or a package no rule is for, before the target's answer
        if engine:
            import libcst  # noqa: F401  (the caller runs the engine next)

            if any(op in ("codemod", "move") for r in self.pack.rules for op, _ in r.ops):
                # Their import edits need RemoveImportsVisitor, whose libcst.matchers is the largest
                # import of libcst: while the target answers, not after.
                import libcst.codemod.visitors  # noqa: F401
        self.check_version()
        # The rules read the .py files RECORD lists: without them, "0 edits" would read as patched.
        self.refuse_editable()
        self.refuse_sourceless()

    def check_package(self) -> None:
        """Refuse --package naming a distribution the rules are not for: its files would be
        recorded and called patched with no rule ever looking at them."""
        from ..errors import UsageError
        from ..words import listing

        if not self.pack.targets(self.settings.package):
            raise UsageError(f"--package {self.settings.package}: the rules are for "
                             f"{listing(list(self.pack.packages))} only (a rule file's 'package:' "
                             f"names the package it is for); nothing was recorded")

    def check_version(self) -> Version:
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
        # Before anything reads or writes it: a damaged overlay must not pass for "already patched",
        # nor one of another user's or another environment's be read at all.
        check_overlay(path, self.target.package, self.target.version, self.target.location)
        return Overlay(path, self.target.location, allowed=self.tracked)

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
        rules = self.full_pack.rules  # the left-out rules' too: a rehearsal may name them
        calls = {c for r in rules for c in r.calls} | {c for r in rules for c, _ in r.guard.accepts}
        return source.get_many(sorted(calls)), SignatureKind(source.kind)

    @cached_property
    def facts(self) -> dict[str, bool | None] | None:
        """Whether the class attributes scoped rules' guards name exist in the installed vLLM."""
        if self.settings.no_guard:
            return None
        source = self._guard_source
        facts: dict[str, bool | None] = {}
        if source is not None:
            names = sorted({n for r in self.full_pack.rules for n in (*r.guard.defines, *r.guard.lacks)})
            facts = {n: source.defines(n) for n in names}
        requirements = {req for r in self.full_pack.rules for req in r.guard.requires}
        if requirements:
            from ..rules.model import requirement_fact
            from ..versions import satisfies

            installed = dict(self.target.dependencies)
            for dist, spec in sorted(requirements):
                # Unknown (`since` decides) where the package does not declare the distribution or
                # the target lacks it (a sandbox installed --no-deps: nothing to import against).
                version = installed.get(dist)
                facts[requirement_fact(dist, spec)] = None if version is None else satisfies(version, spec)
        return facts if source is not None or facts else None

    @cached_property
    def _guard_source(self) -> StaticSource | None:
        if self.settings.no_guard:
            return None
        return self.static_source

    @property
    def static_source(self) -> StaticSource | None:
        """vLLM's source read statically (--vllm-source, else the installed vLLM's), or None."""
        if isinstance(self._static, _Unread):
            from ..signatures.select import guard_source

            self._static = guard_source(self.target, self.settings.vllm_source)
        assert not isinstance(self._static, _Unread)
        return self._static

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
            source = self.static_source
            assert source is not None  # a --vllm-source, or an installed vLLM's source
            return source.get_many(sorted(callees)), SignatureKind.STATIC, ""
        return binding_signatures(self.target, callees, vllm_source=self.settings.vllm_source,
                                  static=self.settings.static, probe=probe)

    def plan(self, files: dict[str, bytes] | None = None,
             declined: frozenset[tuple[str, int, str]] = frozenset(), reuse: bool = False,
             everything: bool = False) -> Plan:
        """What apply would write, computed from the original bytes (or `files`). Every plan is
        kept in the plan cache; `reuse` (a command that writes nothing) takes it from there when
        nothing it depends on changed; `everything`: with the rules --skip/--only leave out."""
        from ..rewrite.plan import make_plan

        # libcst imports while the target answers, unless the plan may come from the cache.
        self.load(engine=not reuse or self.plan_cache is None or self.plan_cache.empty)
        signatures, kind = self.guard
        pack = self.full_pack if everything else self.pack
        return make_plan(self.target, pack, self.settings.vllm_version, signatures, kind,
                         files=self.originals() if files is None else files, declined=declined,
                         facts=self.facts, source=self.source_version, cache=self.plan_cache, reuse=reuse)

    @cached_property
    def plan_cache(self) -> PlanCache | None:
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

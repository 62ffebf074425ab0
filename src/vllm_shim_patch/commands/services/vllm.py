"""The installed vLLM as the rules and the bindings read it: its source read statically
(--vllm-source, else the installed vLLM's; one reader per run, so each module is parsed once),
the version --vllm-source carries, the guards' signatures and facts, and the signatures calls
bind against (live, unless --static or --vllm-source)."""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING, Any

from ...errors import UsageError
from ...kinds import SignatureKind

if TYPE_CHECKING:
    from ...settings import Settings
    from ...signatures.static import StaticSignatures as StaticSource
    from .probe import TargetProbe
    from .rules import RuleSet


class _Unread:
    """vLLM's source not opened yet (None is an answer: no source known)."""


_UNREAD = _Unread()


class InstalledVllm:
    """What the tool reads of the vLLM `probe`'s target has (or `settings.vllm_source`), for the
    callees and guards of `rules`."""

    def __init__(self, settings: Settings, probe: TargetProbe, rules: RuleSet):
        self._settings = settings
        self._probe = probe
        self._rules = rules
        self._static: StaticSource | None | _Unread = _UNREAD

    def open_given(self) -> None:
        """Open --vllm-source's reader now (it does not need the target's answer); an error is
        left to surface at `source`, where it is opened again."""
        if self._settings.vllm_source and isinstance(self._static, _Unread):
            from ...errors import PatchError
            from ...signatures.select import source_reader

            try:
                self._static = source_reader(self._settings.vllm_source)
            except PatchError:
                pass

    @property
    def opened(self) -> bool:
        """Whether vLLM's source has been opened (by `open_given` or `source`)."""
        return not isinstance(self._static, _Unread)

    @property
    def source(self) -> StaticSource | None:
        """vLLM's source read statically (--vllm-source, else the installed vLLM's), or None."""
        if isinstance(self._static, _Unread):
            from ...signatures.select import guard_source

            self._static = guard_source(self._probe.target, self._settings.vllm_source)
        assert not isinstance(self._static, _Unread)
        return self._static

    @cached_property
    def source_version(self) -> tuple[str, str | None] | None:
        """--vllm-source and the version it carries (None without --vllm-source)."""
        import zipfile
        from pathlib import Path

        from ...versions import source_version

        if not self._settings.vllm_source:
            return None
        path = Path(self._settings.vllm_source).expanduser()
        if not path.is_dir() and not (path.is_file() and zipfile.is_zipfile(path)):
            what = "no such file or folder" if not path.exists() else "neither a folder nor a wheel"
            raise UsageError(f"--vllm-source {path}: {what} (give vLLM's source folder or its wheel)")
        return str(path), source_version(path)

    @cached_property
    def guard(self) -> tuple[dict[str, Any] | None, SignatureKind | None]:
        """The installed vLLM's signatures of every rule callee (None: unguarded), and their kind."""
        source = self._guard_source
        if source is None:
            return None, None
        rules = self._rules.full.rules  # the left-out rules' too: a rehearsal may name them
        calls = {c for r in rules for c in r.calls} | {c for r in rules for c, _ in r.guard.accepts}
        return source.get_many(sorted(calls)), SignatureKind(source.kind)

    @cached_property
    def facts(self) -> dict[str, bool | None] | None:
        """Whether the class attributes scoped rules' guards name exist in the installed vLLM, and
        whether the distributions their `requires` name are installed in versions that satisfy it."""
        if self._settings.no_guard:
            return None
        source = self._guard_source
        rules = self._rules.full.rules
        facts: dict[str, bool | None] = {}
        if source is not None:
            names = sorted({n for r in rules for n in (*r.guard.defines, *r.guard.lacks)})
            facts = {n: source.defines(n) for n in names}
        requirements = {req for r in rules for req in r.guard.requires}
        if requirements:
            from ...rewrite.rule import requirement_fact
            from ...versions import satisfies

            installed = dict(self._probe.target.dependencies)
            for dist, spec in sorted(requirements):
                # Unknown (`since` decides) where the package does not declare the distribution or
                # the target lacks it (a sandbox installed --no-deps: nothing to import against).
                version = installed.get(dist)
                facts[requirement_fact(dist, spec)] = None if version is None else satisfies(version, spec)
        return facts if source is not None or facts else None

    @cached_property
    def _guard_source(self) -> StaticSource | None:
        if self._settings.no_guard:
            return None
        return self.source

    @property
    def live(self) -> bool:
        """Whether calls bind against the live vLLM (unless --static or --vllm-source)."""
        from ...signatures.select import wants_live

        return wants_live(self._probe.target, vllm_source=self._settings.vllm_source,
                          static=self._settings.static)

    def bindings(self, callees: set[str], probe: dict[str, Any] | None = None
                 ) -> tuple[dict[str, Any], SignatureKind | None, str]:
        """Signatures to bind calls against (`probe`: the live answer, already asked)."""
        from ...signatures.select import binding_signatures

        settings = self._settings
        if settings.vllm_source or (settings.static and self._probe.target.vllm_location is not None):
            # The source the guards already read: one parse of each vLLM module per run; read
            # afresh, never from the cache the guards may have answered from (a cached answer must
            # not both decide what is written and pass it).
            source = self.source
            assert source is not None  # a --vllm-source, or an installed vLLM's source
            return source.get_many(sorted(callees), fresh=True), SignatureKind.STATIC, ""
        return binding_signatures(self._probe.target, callees, vllm_source=settings.vllm_source,
                                  static=settings.static, probe=probe)

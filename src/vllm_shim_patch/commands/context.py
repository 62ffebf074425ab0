"""What every command shares: the outcome type, and the context of one run.

`Context` holds the settings, how the run speaks, and the lazy services (`services/`: the target
probe, the rules, the installed vLLM's source and signatures, the package's files), each loaded on
first use and kept, so a command is a few named steps over it; the checks that refuse a run are
in `preflight.py`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from ..settings import Log, Settings, quiet
from . import preflight
from .services import InstalledVllm, PackageFiles, RuleSet, TargetProbe

if TYPE_CHECKING:
    from ..report.diff import Hunk
    from ..rewrite.plan import Plan
    from ..rewrite.plancache import PlanCache
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
    diff: bool = False  # the text is a unified diff: the CLI colours it on a terminal

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


class Context:
    """One run: its settings, how it speaks (`log`: progress on stderr), who reviews the hunks
    (`review`, interactive apply: asked which to decline), and the services a command reads, each
    loaded on first use: `probe` (the target), `rules`, `vllm` (source, signatures, guard facts),
    `files` (overlay, original and installed bytes). `load` and `plan` compose them."""

    _loaded: bool | None = None  # `load` has run: whether with the engine (None: not yet)

    def __init__(self, settings: Settings, log: Log = quiet, review: Review | None = None):
        self.settings = settings
        self.log = log
        self.review = review
        self.probe = TargetProbe(settings.python, settings.package)
        self.rules = RuleSet(settings)
        self.vllm = InstalledVllm(settings, self.probe, self.rules)
        self.files = PackageFiles(settings.state_dir, self.probe)

    @property
    def target(self) -> Target:
        """The installed package as the target interpreter reports it (asked once)."""
        return self.probe.target

    @property
    def who(self) -> str:
        return f"{self.target.package} {self.target.version}"

    def start_probe(self) -> None:
        """Ask the target interpreter now, in a thread (it waits on a subprocess), and open a
        --vllm-source's reader meanwhile, which does not need the answer: for a command that reads
        `target` (`load` starts here; `audit --no-rules` calls it directly). An error of either
        surfaces where it always did: the probe's at `target`, the reader's at `vllm.source` (it is
        simply opened again there)."""
        if self.probe.start():
            self.vllm.open_given()

    def load(self, engine: bool = True) -> None:
        """Target and rules for a command that runs the engine, checked before anything is read
        further: the target interpreter answers (`start_probe`) while the rules load and
        (`engine`) libcst imports here. Once a run: apply loads before its lock, and its plan
        does not load again."""
        if self._loaded is not None and (self._loaded or not engine):
            return
        self.start_probe()
        # A bad rule file, or a package no rule is for, before the target's answer.
        preflight.check_package(self.settings.package, self.rules.pack)
        if engine:
            import libcst  # noqa: F401  (the caller runs the engine next)

            moves = [r.since for r in self.rules.pack.rules if any(op == "move" for op, _ in r.ops)]
            if moves and _may_move(self.settings.vllm_version, moves):
                # A move's import edits need RemoveImportsVisitor, whose libcst.matchers is the
                # largest import of libcst: while the target answers, not after. (A codemod's
                # dropped import mostly goes without it: rewrite/scoped.py `remove_imports`; where
                # it does not, or a guard applies a move early, the engine imports it then.)
                import libcst.codemod.visitors  # noqa: F401
        preflight.check_version(self.settings.vllm_version, self.target, self.vllm.source_version)
        preflight.refuse_editable(self.target)
        preflight.refuse_sourceless(self.target)
        self._loaded = engine

    def plan(self, files: dict[str, bytes] | None = None,
             declined: frozenset[tuple[str, int, str]] = frozenset(), reuse: bool = False,
             everything: bool = False) -> Plan:
        """What apply would write, computed from the original bytes (or `files`). Every plan is
        kept in the plan cache; `reuse` (a command that writes nothing) takes it from there when
        nothing it depends on changed; `everything`: with the rules --skip/--only leave out."""
        from ..rewrite.plan import make_plan

        # libcst imports while the target answers, unless the plan may come from the cache.
        self.load(engine=not reuse or self.plan_cache is None or self.plan_cache.empty)
        signatures, kind = self.vllm.guard
        pack = self.rules.full if everything else self.rules.pack
        return make_plan(self.target, pack, self.settings.vllm_version, signatures, kind,
                         files=self.files.originals() if files is None else files, declined=declined,
                         facts=self.vllm.facts, source=self.vllm.source_version, cache=self.plan_cache,
                         reuse=reuse)

    @cached_property
    def plan_cache(self) -> PlanCache | None:
        """The plan cache under the tool's cache folder (beside the signature cache), or None."""
        from ..rewrite.plancache import PlanCache
        from ..signatures.static.cache import default_cache_dir

        folder = default_cache_dir()
        return PlanCache(folder) if folder is not None else None


def _may_move(vllm_version: str | None, since: list[Any]) -> bool:
    """Whether a move rule (one of `since`) can apply to the --vllm-version asked for: any, where
    none was asked (the target's vLLM decides) or it does not parse (preflight says why)."""
    if vllm_version is None:
        return True
    from packaging.version import InvalidVersion, Version

    try:
        asked = Version(vllm_version)
    except InvalidVersion:
        return True
    return any(asked >= s for s in since)

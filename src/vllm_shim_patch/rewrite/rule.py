"""Rules as frozen data: what `rules/loader.py` reads from YAML and the engine compiles (standard
library only, nothing of ours: every layer from here up may hold a `Rule`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SCHEMA_VERSION = 1
DEFAULT_PACKAGE = "speculators"  # a rule file without `package:` is for it


def canonical_name(name: str) -> str:
    """A distribution name as PEP 503 compares them (`Foo_Bar` is `foo-bar`)."""
    import re

    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Example:
    before: str
    after: str
    line: int


@dataclass(frozen=True)
class OldSignature:
    """The callee's signature as the package was written against it (to name positionals)."""

    text: str
    positional: tuple[str, ...]  # parameters a positional argument can fill, in order
    names: frozenset[str]
    star_args: bool  # a *args in the old signature: positionals past `positional` are unknown
    positional_only: frozenset[str] = frozenset()  # cannot be passed by keyword


@dataclass(frozen=True)
class Guard:
    """What the installed vLLM must show for a scoped rule to act (read statically, like signatures)."""

    defines: tuple[str, ...] = ()  # class attributes that must exist: vllm.x.C.method
    lacks: tuple[str, ...] = ()  # class attributes that must not exist
    accepts: tuple[tuple[str, str], ...] = ()  # (callable, parameter) the callable must take
    # (distribution, version specifier) the target's installed distribution must satisfy: for
    # breaks of the package's other dependencies (transformers 5), which vLLM's source cannot tell.
    requires: tuple[tuple[str, str], ...] = ()
    # (name of a `defines`/`lacks` entry, the sentence that says what its failing means): where
    # one absence reads two ways (V1 gone, or V1 the only runner), the rule says which.
    reasons: tuple[tuple[str, str], ...] = ()

    def __add__(self, other: Guard) -> Guard:
        return Guard(self.defines + other.defines, self.lacks + other.lacks, self.accepts + other.accepts,
                     self.requires + other.requires, self.reasons + other.reasons)

    def __bool__(self) -> bool:
        return bool(self.defines or self.lacks or self.accepts or self.requires)


def requirement_fact(distribution: str, specifier: str) -> str:
    """The key of a `requires:` guard's answer among the guards' facts (no qualified name has a
    comparison operator in it, so it cannot collide with a `defines`/`lacks` name)."""
    return f"{distribution}{specifier}"


@dataclass(frozen=True)
class Rule:
    id: str
    calls: tuple[str, ...]
    since: Any  # packaging.version.Version; typed loosely so this module stays light to import
    why: str
    path: str
    line: int
    signature: OldSignature | None = None
    # (operation name, its parsed spec), in the registry's run order (`rewrite.ops.OPERATIONS`).
    ops: tuple[tuple[str, Any], ...] = ()
    examples: tuple[Example, ...] = ()
    unchanged: tuple[str, ...] = ()
    scope: str | None = None  # `in: module:Qual.name`: a scoped rule (no `call`)
    guard: Guard = Guard()  # a scoped rule's guard, its operations' own guards included
    package: str = DEFAULT_PACKAGE  # the distribution its file's `package:` names
    option: str | None = None  # `option:`: applied only with this opt-in (kinds.RuleOption)
    # `symptoms:`: patterns of the rehearsal failures the rule fixes where no site of it is on the
    # failing line (a keyword a replaced function no longer takes, an opt-in's error).
    symptoms: tuple[str, ...] = ()

    @property
    def operations(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.ops)

    def op(self, name: str) -> Any:
        """The spec of operation `name` in this rule, or None."""
        return next((spec for op, spec in self.ops if op == name), None)

    @property
    def target(self) -> str:
        """What the rule is about: its first callable, or its region."""
        return self.calls[0] if self.calls else f"in {self.scope}"

    @property
    def short_names(self) -> frozenset[str]:
        return frozenset(c.rsplit(".", 1)[1] for c in self.calls)


@dataclass(frozen=True)
class RulePack:
    rules: tuple[Rule, ...]
    sources: tuple[str, ...] = field(default=())

    @property
    def packages(self) -> tuple[str, ...]:
        """The distributions the rules are for, as their files name them."""
        return tuple(dict.fromkeys(r.package for r in self.rules))

    def targets(self, package: str) -> bool:
        return canonical_name(package) in {canonical_name(p) for p in self.packages}

    def by_id(self, rule_id: str) -> Rule:
        for rule in self.rules:
            if rule.id == rule_id:
                return rule
        raise KeyError(rule_id)

    def unknown(self, ids: tuple[str, ...]) -> list[str]:
        """The ids in `ids` that name no rule of this pack, in the order given."""
        known = {r.id for r in self.rules}
        return [i for i in dict.fromkeys(ids) if i not in known]

    def selected(self, skip: tuple[str, ...] = (), only: tuple[str, ...] = (),
                 options: frozenset[str] = frozenset()) -> RulePack:
        """The rules `--only` names (all, when none), less those `--skip` names (ids known), less
        those whose opt-in (`option:`) is not among `options`."""
        keep = [r for r in self.rules if (not only or r.id in only) and r.id not in skip
                and (r.option is None or r.option in options)]
        return RulePack(tuple(keep), self.sources)

"""The `rules` commands as text, and the rule documentation generated from the rule files (the
README's table is `table`'s output)."""

from __future__ import annotations

from collections.abc import Iterable

from typing import TYPE_CHECKING

from ..rewrite.ops import OPERATIONS
from ..rewrite.rule import Rule
from ..words import plural

if TYPE_CHECKING:
    from ..rules.testing import CaseResult


def _what(rule: Rule) -> str:
    what = "; ".join(OPERATIONS[name].describe(rule.op(name)) for name in rule.operations)
    return what + (f"; only with `--{rule.option}`" if rule.option else "")


def rows(rules: Iterable[Rule]) -> list[dict[str, str]]:
    """The table's rows as data (`rules docs --json`)."""
    return [{"id": r.id, "call": r.target, "since": str(r.since), "what": _what(r)} for r in rules]


def table(rules: Iterable[Rule]) -> str:
    """A Markdown table of rules: id, callable, since, what it does."""
    lines = ["| id | call | since | what |", "|---|---|---|---|"]
    for rule in rules:
        lines.append(f"| `{rule.id}` | `{rule.target}` | {rule.since} | {_what(rule)} |")
    return "\n".join(lines) + "\n"


def listing(rules: list[Rule]) -> str:
    """One line a rule: id, since, operations, the callable it rewrites."""
    width = max((len(r.id) for r in rules), default=2)
    return "\n".join(f"{r.id:<{width}}  since {str(r.since):<8} {', '.join(r.operations):<12} {r.target}"
                     + (f" (only with --{r.option})" if r.option else "") for r in rules)


def checked(rules: int, files: int) -> str:
    return f"{plural(rules, 'rule')} OK in {plural(files, 'file')}"


def tested(results: list[CaseResult]) -> str:
    """Each failing example with its diff, then the count."""
    bad = [r for r in results if not r.ok]
    lines = []
    for r in bad:
        lines.append(f"FAIL {r.case.id} ({r.case.rule.path}): {r.problem}")
        lines.append(r.diff().rstrip("\n"))
    if not results:
        lines.append("no examples to run")
    lines.append(f"{plural(len(results) - len(bad), 'example')} ok, {len(bad)} failing")
    return "\n".join(lines)

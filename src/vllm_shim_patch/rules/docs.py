"""Rule documentation generated from the rule files (the README's table is this output)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from ..rewrite.ops import OPERATIONS
from .loader import bundled_optional_packs, bundled_rule_files
from .model import Rule


def _what(rule: Rule) -> str:
    return "; ".join(OPERATIONS[name].describe(rule.op(name)) for name in rule.operations)


def table(rules: Iterable[Rule]) -> str:
    """A Markdown table of rules: id, pack, callable, since, what it does."""
    optional = {str(p): name for name, p in bundled_optional_packs().items()}
    default = {str(p) for p in bundled_rule_files()}
    lines = ["| id | pack | call | since | what |", "|---|---|---|---|---|"]
    for rule in rules:
        if rule.path in optional:
            pack = f"`--rules {optional[rule.path]}`"
        else:
            pack = "default" if rule.path in default else Path(rule.path).name
        lines.append(f"| `{rule.id}` | {pack} | `{rule.target}` | {rule.since} | {_what(rule)} |")
    return "\n".join(lines) + "\n"

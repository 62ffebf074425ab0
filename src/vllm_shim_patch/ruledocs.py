"""Rule documentation generated from the rule files (the README's table is this output)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from .rules import Rule, bundled_optional_packs, bundled_rule_files


def _what(rule: Rule) -> str:
    parts = [f"drop `{n}`" for n in rule.drop]
    parts += [f"add `{n}={v}`" for n, v in rule.add]
    parts += [f"rename `{a}` to `{b}`" for a, b in rule.rename]
    if rule.move:
        parts.append(f"move to `{rule.move}`")
    if rule.codemod:
        parts.append(f"codemod `{rule.codemod}`")
    if rule.notice:
        about = f" (unless `{'`, `'.join(rule.missing)}` passed)" if rule.missing else ""
        parts.append(f"notice{about}")
    return "; ".join(parts)


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
        lines.append(f"| `{rule.id}` | {pack} | `{rule.calls[0]}` | {rule.since} | {_what(rule)} |")
    return "\n".join(lines) + "\n"

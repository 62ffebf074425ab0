"""Rule files: YAML read into frozen `Rule`s (model, loader), their examples run (testing), their docs."""

from __future__ import annotations

from .loader import bundled_optional_packs, bundled_rule_files, load_file, load_pack, parse_rules
from .model import Example, OldSignature, Rule, RulePack

__all__ = [
    "Example",
    "OldSignature",
    "Rule",
    "RulePack",
    "bundled_optional_packs",
    "bundled_rule_files",
    "load_file",
    "load_pack",
    "parse_rules",
]

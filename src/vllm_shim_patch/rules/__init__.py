"""Rule files: YAML read into frozen `Rule`s (`loader`), their examples run with the engine
(`testing`), their docs generated (in `report/rules.py`). The layer above `rewrite/`: the loader
asks each operation in `rewrite.ops` to parse its own keys. The model itself is
`rewrite/rule.py` (the engine compiles it); it is re-exported here, and importing this package
loads neither the loader nor the operations."""

from __future__ import annotations

from ..rewrite.rule import Example, Guard, OldSignature, Rule, RulePack

__all__ = ["Example", "Guard", "OldSignature", "Rule", "RulePack"]

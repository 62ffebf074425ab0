"""Rule files: YAML read into frozen `Rule`s (`model`, `loader`), their examples run (`testing`),
their docs generated (in `report/rules.py`). Only the model is re-exported here: the loader depends on the
operations in `rewrite.ops`, which depend on the model, so importing the model must not load them."""

from __future__ import annotations

from .model import Example, Guard, OldSignature, Rule, RulePack

__all__ = ["Example", "Guard", "OldSignature", "Rule", "RulePack"]

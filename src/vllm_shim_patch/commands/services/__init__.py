"""The lazy services a command's `Context` holds: each loads what it stands for on first use and
keeps it. `probe` (the target interpreter's answer), `rules` (the loaded rules and this run's
selection), `vllm` (the installed vLLM's source and signatures, the guards' facts), `files` (the
overlay, the original and installed bytes). The checks that refuse a run are not here but in
`commands/preflight.py`."""

from __future__ import annotations

from .files import PackageFiles
from .probe import TargetProbe
from .rules import RuleSet
from .vllm import InstalledVllm

__all__ = ["InstalledVllm", "PackageFiles", "RuleSet", "TargetProbe"]

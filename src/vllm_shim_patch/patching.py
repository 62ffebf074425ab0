"""The user's workflows: plan, apply (a transaction), check, rollback, history, verify, audit."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .cli import Settings
    from .plan import Plan


@dataclass
class Outcome:
    text: str
    data: dict[str, Any] = field(default_factory=dict)
    exit_code: int = 0
    ok: bool = True


Log = Callable[[str], None]


def plan_for(s: Settings, vllm_version: str | None, files: dict[str, bytes] | None = None) -> Plan:
    from .plan import make_plan
    from .rules import load_pack
    from .target import probe

    pack = load_pack(s.rules)
    target = probe(s.python, s.package)
    return make_plan(target, pack, vllm_version, files=files)

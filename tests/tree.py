"""The project's own source tree read with plain tools (PyYAML, the file system), never our loader:
the independent reference for tests that check what the tool loads or ships."""

from __future__ import annotations

from pathlib import Path

import yaml
from packaging.version import Version


def rules() -> list[tuple[str, str, tuple[str, ...], str]]:
    """(id, since, operations, target) of every rule in the source tree's rules/*.yaml, read with
    plain PyYAML (not our loader), the operations named by the tree's rewrite/ops/ modules."""
    repo = Path(__file__).resolve().parents[1]
    ops = {p.stem for p in (repo / "src" / "vllm_shim_patch" / "rewrite" / "ops").glob("*.py")} - {"__init__", "base"}
    rows = []
    for path in sorted((repo / "rules").glob("*.yaml")):
        for raw in yaml.safe_load(path.read_text(encoding="utf-8"))["rules"]:
            named = tuple(op for op in raw if op in ops)
            call = raw.get("call")
            target = f"in {raw['in']}" if "in" in raw else call[0] if isinstance(call, list) else call
            rows.append((raw["id"], str(Version(raw.get("since", "0.10.0"))), named, target))
        assert rows, f"{path.name} holds no rule"
    return rows


def rule_ids() -> list[str]:
    return [row[0] for row in rules()]

"""The digest of the rules a wheel was built with: the bytes of every rule file and of every
module in the folder of each codemod they name (a codemod may import its neighbours), by file
name, not path (the same rules give the same digest on every machine), and the ids loaded."""

from __future__ import annotations

import hashlib
from pathlib import Path

from ..errors import UsageError
from ..rewrite.rule import RulePack


def rules_digest(pack: RulePack) -> str:
    codemod_dirs = {Path(str(spec)).parent for r in pack.rules for op, spec in r.ops if op == "codemod"}
    paths = {Path(r.path) for r in pack.rules} | {p for d in codemod_dirs for p in d.glob("*.py")}
    h = hashlib.sha256()
    named = []
    for path in paths:
        try:
            named.append((f"{'codemod' if path.suffix == '.py' else 'rules'}/{path.name}", path.read_bytes()))
        except OSError as exc:
            raise UsageError(f"cannot read {path} for the rules' digest ({exc.strerror or exc})") from None
    for name, data in sorted(named):
        h.update(f"{name}\0{len(data)}\0".encode())
        h.update(data)
    for rule_id in sorted(r.id for r in pack.rules):
        h.update(f"rule\0{rule_id}\0".encode())
    return "sha256:" + h.hexdigest()

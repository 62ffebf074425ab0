"""The audit of the package's imports of other packages (transformers, torch, pydantic...):
each module imports in the target, and defines each name imported from it.

Only the target can answer: its distributions decide, and a lazy package (transformers'
`_LazyModule`) defines its names only when really imported. So the modules are imported there,
once a run, in the target session (`_remote/package_imports.py`), before vLLM. A use inside a
feature test (`try: ... except ImportError`, `if TYPE_CHECKING`) that fails is unknown, as a
vLLM use there is (`Checker.check`); a package that is not installed at all is unknown too, as
verification's "not tested" says: nothing of it could be checked.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

from ..kinds import BindStatus
from .audit import AuditRow, Checker
from .calls import CallRecord
from .verify import Binding

_STATUS = {"ok": BindStatus.OK, "missing": BindStatus.MISMATCH, "failed": BindStatus.MISMATCH}


@dataclass(frozen=True)
class PackageAudit:
    """The rows of the other packages' imports, and what the target said of each package."""

    rows: list[AuditRow]
    distributions: dict[str, list[str]] = field(default_factory=dict)  # top -> ["transformers 4.57.6"]
    not_installed: dict[str, str] = field(default_factory=dict)  # top -> why (the requirement)
    note: str = ""  # why nothing was checked


def request(uses: list[CallRecord]) -> dict[str, list[str]]:
    """What to import in the target: each module, and the names imported from it."""
    out: dict[str, list[str]] = {}
    for use in uses:
        if use.whole_module:
            out.setdefault(use.callee, [])
        else:
            module, _, name = use.callee.rpartition(".")
            names = out.setdefault(module, [])
            if name not in names:
                names.append(name)
    return {k: sorted(v) for k, v in sorted(out.items())}


class PackageChecker(Checker):
    """Checks one import of another package against the target's answer (None: not asked;
    `note` then says why)."""

    def __init__(self, answer: dict[str, Any] | None, package: str, note: str = ""):
        super().__init__({}, note, None)
        self.package = package
        self.answer = answer or {}
        self.tops: dict[str, Any] = self.answer.get("tops") or {}
        self.modules: dict[str, Any] = self.answer.get("modules") or {}

    def stdlib(self, use: CallRecord) -> bool:
        top = use.callee.split(".")[0]
        if top not in self.tops:  # no answer: this interpreter's list (the target's may differ a little)
            return top in sys.stdlib_module_names
        return bool(self.tops[top].get("stdlib"))

    def _import(self, use: CallRecord) -> Binding:
        top = self.tops.get(use.callee.split(".")[0])
        if top is None:
            return Binding(use, BindStatus.UNKNOWN, self.note or "no answer from the target")
        if not top.get("found"):
            return Binding(use, BindStatus.UNKNOWN, not_installed(top, self.package))
        module, name = (use.callee, None) if use.whole_module else use.callee.rpartition(".")[::2]
        entry = self.modules.get(module)
        if entry is None:
            return Binding(use, BindStatus.UNKNOWN, "no answer from the target")
        failed = f"import of {module} fails"
        if entry.get("status") == "ok" and name is not None:
            entry = (entry.get("names") or {}).get(name) or {"status": None}
            failed = f"from {module} import {name} fails"  # a lazy package imports it on first read
        status = _STATUS.get(entry.get("status") or "", BindStatus.UNKNOWN)
        message = str(entry.get("message") or "")
        if entry.get("status") == "failed":
            message = f"{failed}: {message}"
        return Binding(use, status, message if status is not BindStatus.OK else "")


def not_installed(top: dict[str, Any], package: str) -> str:
    """Why a package no finder of the target knows is not checked (the requirement, if declared)."""
    required = str(top.get("requires") or "")
    spec, _, marker = (part.strip() for part in required.partition(";"))
    when = f" when {marker}" if marker else ""  # an extra's or a platform's: optional here
    return "not installed in the target" + (f"; {package} requires {spec}{when}" if spec else "")


def audit_packages(rows: list[AuditRow], checker: PackageChecker) -> PackageAudit:
    """The rows of the imports of packages that are not the standard library's, with what the
    target said of each package."""
    kept = [r for r in rows if not checker.stdlib(r.before.call)]
    tops = sorted({r.before.call.callee.split(".")[0] for r in kept})
    dists = {t: [f"{n} {v}" if v else n for n, v in checker.tops[t].get("distributions") or ()]
             for t in tops if t in checker.tops and checker.tops[t].get("found")}
    absent = {t: not_installed(checker.tops[t], checker.package) for t in tops if t in checker.tops and not checker.tops[t].get("found")}
    return PackageAudit(kept, dists, absent, checker.note)


__all__ = ["PackageAudit", "PackageChecker", "audit_packages", "not_installed", "request"]

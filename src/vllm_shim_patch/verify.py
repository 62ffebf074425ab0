"""Verification in the target interpreter: an import smoke test plus binding of rewritten calls."""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .errors import VerifyError
from .target import run_remote

if TYPE_CHECKING:
    from .cli import Settings
    from .plan import Plan
    from .target import Target

IMPORT_TIMEOUT = 600.0


@dataclass
class VerifyResult:
    ok: bool
    reason: str = ""
    lines: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    summary: str = ""


def module_name(relpath: str) -> str:
    parts = relpath[: -len(".py")].split("/")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_check(target: Target, modules: list[str], timeout: float = IMPORT_TIMEOUT) -> list[dict[str, Any]]:
    """Import each module in a fresh target interpreter, from a neutral folder (no cwd shadowing)."""
    with tempfile.TemporaryDirectory(prefix="vsp-import-") as cwd:
        request = json.dumps({"modules": modules, "own": target.package.replace("-", "_").split(".")[0]})
        try:
            proc = run_remote(target.python, "import_check.py", stdin=request, timeout=timeout, cwd=cwd)
        except Exception as exc:
            raise VerifyError(f"import smoke test could not run: {exc}") from None
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-5:])
        raise VerifyError(f"import smoke test crashed the interpreter (exit {proc.returncode}): {tail}")
    return list(json.loads(proc.stdout))


def verify_plan(target: Target, plan: Plan, s: Settings) -> VerifyResult:
    modules = sorted({module_name(r.path) for r in plan.changed})
    results = import_check(target, modules)
    lines = []
    failed = [r for r in results if r["status"] == "failed"]
    missing = [r for r in results if r["status"] == "missing-dependency"]
    for r in results:
        if r["status"] == "ok":
            lines.append(f"import {r['module']}: ok ({r['seconds']:.2f}s)")
        elif r["status"] == "missing-dependency":
            lines.append(f"import {r['module']}: not tested, {r['missing']} is not installed in the target")
        else:
            lines.append(f"import {r['module']}: FAILED\n{r['traceback'].rstrip()}")
    data = {"imports": results}
    if failed:
        first = failed[0]
        last = first["traceback"].strip().splitlines()[-1]
        return VerifyResult(False, f"import {first['module']} failed: {last}", lines, data)
    summary = "passed (import)" if not missing else f"passed (import not tested: {missing[0]['missing']} missing)"
    return VerifyResult(True, "", lines, data, summary)

"""Whether the rewritten files compile, decided by the target interpreter's grammar.

The tool may run another Python than the target (pipx on 3.11, an ML environment on 3.13): a
file with 3.12 syntax is valid there and not here, and the reverse. All changed files go to the
target in one process (`_remote/compile_check.py`); nothing is executed there.
"""

from __future__ import annotations

import base64
import dataclasses
import json
from collections.abc import Sequence

from ..errors import TargetError
from ..settings import FileStatus
from ..target import Target, run_remote
from .engine import FileResult

COMPILE_TIMEOUT = 120.0


def compile_in_target(target: Target, results: Sequence[FileResult]) -> list[FileResult]:
    """`results` with every changed file the target cannot compile turned into a failed one."""
    changed = [r for r in results if r.changed]
    if not changed:
        return list(results)
    request = json.dumps({"files": [[r.path, base64.b64encode(r.after).decode("ascii")] for r in changed]})
    proc = run_remote(target.python, "compile_check.py", stdin=request, timeout=COMPILE_TIMEOUT)
    try:
        answer = json.loads(proc.stdout) if proc.returncode == 0 else None
        errors, python = dict(answer["errors"]), str(answer["python"])  # type: ignore[index]
    except (ValueError, TypeError, KeyError):
        tail = (proc.stderr.strip().splitlines() or [proc.stdout.strip()[:200] or "(no output)"])[-1]
        raise TargetError(
            f"interpreter {target.python!r} could not check that the rewritten files compile "
            f"(exit {proc.returncode}): {tail}; nothing written"
        ) from None
    return [
        dataclasses.replace(r, status=FileStatus.FAILED, after=r.before,
                            reason=f"result does not compile for the target's Python {python}: {errors[r.path]}")
        if r.changed and r.path in errors else r
        for r in results
    ]

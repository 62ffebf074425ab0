"""Whether the rewritten files compile, decided by the target interpreter's grammar.

The tool may run another Python than the target (pipx on 3.11, an ML environment on 3.13): a
file with 3.12 syntax is valid there and not here, and the reverse. All changed files go to the
target in one process (`_remote/compile_check.py`); nothing is executed there. The process is
started before the engine runs, so the interpreter's start-up overlaps the rewrite.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import signal
import subprocess
from collections.abc import Sequence

from ..errors import TargetError
from ..kinds import FileStatus
from ..target import REMOTE, Target
from .results import FileResult

COMPILE_TIMEOUT = 120.0


class TargetGrammar:
    """The target interpreter, started now, waiting on stdin for the files to compile."""

    def __init__(self, target: Target):
        self.python = target.python
        env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
        try:
            self.proc: subprocess.Popen[str] | None = subprocess.Popen(
                [self.python, str(REMOTE / "compile_check.py")], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, encoding="utf-8",
                errors="replace", env=env)  # a stray non-UTF-8 byte: an unreadable answer, not a crash
        except OSError as exc:
            raise TargetError(f"cannot run interpreter {self.python!r}: {exc.strerror or exc}") from None

    def check(self, results: Sequence[FileResult]) -> list[FileResult]:
        """`results` with every changed file the target cannot compile turned into a failed one."""
        changed = [r for r in results if r.changed]
        if not changed or self.proc is None:
            self.close()
            return list(results)
        request = json.dumps({"files": [[r.path, base64.b64encode(r.after).decode("ascii")] for r in changed]})
        proc, self.proc = self.proc, None
        try:
            stdout, stderr = proc.communicate(request, timeout=COMPILE_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise TargetError(f"interpreter {self.python!r} did not compile the rewritten files within "
                              f"{COMPILE_TIMEOUT:.0f}s; nothing written") from None
        if proc.returncode in (-signal.SIGINT, -signal.SIGTERM):
            # Ctrl-C reaches the whole foreground group: the check may die of it before the tool
            # sees its own. An interrupt, said as one (cli.py), not a check that could not run.
            raise KeyboardInterrupt
        try:
            answer = json.loads(stdout) if proc.returncode == 0 else None
            errors, python = dict(answer["errors"]), str(answer["python"])  # type: ignore[index]
        except (ValueError, TypeError, KeyError):
            tail = (stderr.strip().splitlines() or [stdout.strip()[:200] or "(no output)"])[-1]
            raise TargetError(
                f"interpreter {self.python!r} could not check that the rewritten files compile "
                f"(exit {proc.returncode}): {tail}; nothing written"
            ) from None
        return [
            dataclasses.replace(r, status=FileStatus.FAILED, after=r.before,
                                reason=f"result does not compile for the target's Python {python}: {errors[r.path]}")
            if r.changed and r.path in errors else r
            for r in results
        ]

    def close(self) -> None:
        """Stop the interpreter if it is still waiting (nothing changed, or the plan failed)."""
        proc, self.proc = self.proc, None
        if proc is not None:
            proc.kill()
            proc.communicate()


def compile_in_target(target: Target, results: Sequence[FileResult]) -> list[FileResult]:
    """`results` with every changed file the target cannot compile turned into a failed one."""
    if not any(r.changed for r in results):
        return list(results)
    grammar = TargetGrammar(target)
    try:
        return grammar.check(results)
    finally:
        grammar.close()

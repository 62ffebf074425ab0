"""Fault injection for the crash-safety tests: SIGKILL ourselves at the Nth checkpoint.

Inert unless VSP_TEST_KILL_AT is set; VSP_TEST_TRACE names a file that records each checkpoint.
"""

from __future__ import annotations

import os
import signal

_count = 0


def checkpoint(name: str) -> None:
    global _count
    kill_at = os.environ.get("VSP_TEST_KILL_AT")
    trace = os.environ.get("VSP_TEST_TRACE")
    if not kill_at and not trace:
        return
    _count += 1
    if trace:
        with open(trace, "a") as f:
            f.write(f"{_count} {name}\n")
    if kill_at and _count == int(kill_at):
        os.kill(os.getpid(), signal.SIGKILL)

"""Fault injection for the crash-safety tests: SIGKILL ourselves, or fail a write, at the Nth checkpoint.

Inert unless one of these is set: VSP_TEST_KILL_AT=N (SIGKILL at the Nth checkpoint),
VSP_TEST_ENOSPC_AT=N (raise OSError ENOSPC there, as a full disk would, and again at every later
checkpoint if VSP_TEST_ENOSPC_STAYS=1: the disk stays full),
VSP_TEST_TRACE=FILE (append each checkpoint's number and name), VSP_TEST_PAUSE_AT=N with
VSP_TEST_PAUSE_FILE=FILE (at the Nth checkpoint create FILE, then wait until it is removed).
"""

from __future__ import annotations

import errno
import os
import signal
import time

_count = 0


def checkpoint(name: str) -> None:
    global _count
    kill_at = os.environ.get("VSP_TEST_KILL_AT")
    trace = os.environ.get("VSP_TEST_TRACE")
    pause_at = os.environ.get("VSP_TEST_PAUSE_AT")
    enospc_at = os.environ.get("VSP_TEST_ENOSPC_AT")
    if not kill_at and not trace and not pause_at and not enospc_at:
        return
    _count += 1
    if trace:
        with open(trace, "a") as f:
            f.write(f"{_count} {name}\n")
    if kill_at and _count == int(kill_at):
        os.kill(os.getpid(), signal.SIGKILL)
    if enospc_at and (_count == int(enospc_at) or (_count > int(enospc_at) and os.environ.get("VSP_TEST_ENOSPC_STAYS"))):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), f"<{name}>")
    if pause_at and _count == int(pause_at):
        flag = os.environ["VSP_TEST_PAUSE_FILE"]
        open(flag, "w").close()
        deadline = time.monotonic() + 60
        while os.path.exists(flag) and time.monotonic() < deadline:
            time.sleep(0.02)

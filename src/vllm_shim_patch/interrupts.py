"""SIGINT and SIGTERM as the CLI takes them: both raise KeyboardInterrupt, so every `with` and
`finally` on the way out runs (temp folders removed, a target's process group killed, an overlay
transaction settled) and the CLI says "interrupted" (130) or "terminated" (143). Python's own
SIGTERM ends the process where it stands, leaving all of that behind.

`held()`: a child process started inside it is known to the caller (its pid assigned) before an
interrupt is raised. Raised while `Popen` waits for the child's exec, an interrupt would leave a
child in a process group of its own that nothing kills, writing into a temp folder already
removed. Standard library only: the CLI installs it before anything else is imported.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import tempfile

_held = 0
_pending = False
terminated = False  # the interrupt was SIGTERM


def _on_signal(signum: int, frame: Any) -> None:
    global _pending, terminated
    terminated = terminated or signum == signal.SIGTERM
    if _held:
        _pending = True
        return
    raise KeyboardInterrupt


def install() -> dict[int, Any] | None:
    """Take SIGINT and SIGTERM (in the main thread; elsewhere nothing is done: None); the handlers
    they had, for `restore`."""
    global terminated, _pending
    if threading.current_thread() is not threading.main_thread():
        return None
    terminated, _pending = False, False
    return {s: signal.signal(s, _on_signal) for s in (signal.SIGINT, signal.SIGTERM)}


def restore(previous: dict[int, Any] | None) -> None:
    for signum, handler in (previous or {}).items():
        signal.signal(signum, handler)


@contextlib.contextmanager
def held() -> Iterator[None]:
    """An interrupt arriving inside is raised on leaving (main thread; elsewhere, as it comes)."""
    global _held, _pending
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _held += 1
    try:
        yield
    finally:
        _held -= 1
        if not _held and _pending:
            _pending = False
            raise KeyboardInterrupt


def temp_dir(prefix: str, ignore_cleanup_errors: bool = False) -> tempfile.TemporaryDirectory[str]:
    """`tempfile.TemporaryDirectory`, made where no interrupt can fall between the folder's
    creation and its cleanup's registration (inside its constructor, after `mkdtemp`): there the
    folder would have no owner. A signal sent as soon as the folder appears lands in that window
    on a loaded machine. An interrupt held there removes the folder before it is raised; raised
    after, it finds the object owning the folder (leaving its `with`, or dropped, it removes it)."""
    import tempfile  # here: the CLI installs this module first, and --help makes no temp folder

    made = None
    try:
        with held():
            made = tempfile.TemporaryDirectory(prefix=prefix, ignore_cleanup_errors=ignore_cleanup_errors)
    except KeyboardInterrupt:
        if made is not None:
            with held():
                made.cleanup()
        raise
    return made

"""The target interpreter's answer (`target.probe`), asked once: in a thread while other work goes
on (`start`), or where it is first needed (`target`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import threading

    from ...target import Target


@dataclass
class _Answer:
    """The probe thread's result: the target, or the error to raise at `TargetProbe.target`."""

    target: Target | None = None
    error: BaseException | None = None


class TargetProbe:
    """The installed package as the target interpreter `python` reports it."""

    def __init__(self, python: str | None, package: str):
        self._python = python
        self._package = package
        self._target: Target | None = None
        self._pending: tuple[threading.Thread, _Answer] | None = None

    def start(self) -> bool:
        """Ask the target interpreter now, in a thread (it waits on a subprocess); False when it
        was asked already. Its error surfaces where it always did: at `target`."""
        import threading  # not concurrent.futures: 4 ms more to import, for one call

        from ...target import probe

        if self._target is not None or self._pending is not None:
            return False
        answer = _Answer()

        def ask() -> None:
            try:
                answer.target = probe(self._python, self._package)
            except BaseException as exc:  # noqa: BLE001  (re-raised in the main thread, at `target`)
                answer.error = exc

        thread = threading.Thread(target=ask, name="probe")
        thread.start()
        self._pending = (thread, answer)
        return True

    @property
    def target(self) -> Target:
        """The answer (the thread's, waited for; or asked now). An error is raised each time it is
        asked for, the probe asked again."""
        if self._target is not None:
            return self._target
        pending, self._pending = self._pending, None
        if pending is not None:  # started by `start`: its answer, or its error, surfaces here
            thread, answer = pending
            thread.join()
            if answer.error is not None:
                raise answer.error
            assert answer.target is not None
            self._target = answer.target
        else:
            from ...target import probe

            self._target = probe(self._python, self._package)
        return self._target

"""One target process for the checks that import vLLM (`_remote/session.py`).

The import check, the imports of other packages, the live signatures and the rehearsal each need vLLM imported, which costs
seconds; asked together they cost one import.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import VerifyError
from ..interrupts import temp_dir
from ..target import json_answer, run_remote
from .handoff import Answer, HandoffError

if TYPE_CHECKING:
    from ..target import Target
    from .handoff import Request

# Importing vLLM on a loaded machine, plus the rehearsal's own bound; the rehearsal's watchdog
# answers before this one fires.
IMPORT_SECONDS = 600.0


@dataclass(frozen=True)
class SessionAnswer:
    imports: list[dict[str, Any]] | None  # import_check's results, when asked
    signatures: dict[str, Any] | None  # signature_probe's {"fatal", "results"}, when asked
    rehearsal: Answer | None  # rehearse's answer, when asked
    packages: dict[str, Any] | None = None  # package_imports' answer, when asked


def run_session(target: Target, *, modules: list[str] | None = None, callees: list[str] | None = None,
                rehearse: Request | None = None, packages: dict[str, list[str]] | None = None
                ) -> SessionAnswer:
    """Ask the target interpreter, in one process, for what is given (None: not asked)."""
    request = {
        "imports": None if modules is None else {"modules": modules, "own": _top(target.package),
                                                 # An editable install runs from its checkout.
                                                 "location": None if target.editable else str(target.location)},
        "packages": None if packages is None else {"modules": packages, "own": target.package},
        "signatures": callees,
        "rehearse": None if rehearse is None else rehearse.to_json(),
    }
    timeout = IMPORT_SECONDS + (rehearse.timeout if rehearse else 0.0)
    # A neutral working folder: nothing in the user's cwd may shadow a module of the target.
    with temp_dir("vsp-session-", ignore_cleanup_errors=True) as cwd:
        # The target's temp folder is inside ours (the rehearsal's vsp-rehearse-*, torch's files):
        # a target killed when the tool is interrupted cannot remove its own, so ours takes them.
        tmp = os.path.join(cwd, "tmp")
        os.mkdir(tmp)
        env = {**os.environ, "TMPDIR": tmp}
        try:
            # Its own process group, killed when it ends: the rehearsal's worker processes with it.
            proc = run_remote(target.python, "session.py", stdin=json.dumps(request), timeout=timeout, cwd=cwd,
                              env=env, own_group=True)
        except Exception as exc:
            raise VerifyError(f"the checks in the target could not run: {exc}") from None
    answer = json_answer(proc)
    if answer is None:
        tail = "\n".join(proc.stderr.strip().splitlines()[-5:])
        raise VerifyError(f"the checks in the target crashed the interpreter (exit {proc.returncode}): {tail}")
    return SessionAnswer(answer.get("imports"), answer.get("signatures"), _rehearsal(answer.get("rehearse")),
                         answer.get("packages"))


def _rehearsal(data: Any) -> Answer | None:
    """The rehearsal's answer, read through its type: one the target cannot have sent is an error
    of the target's side, said in one line."""
    if data is None:
        return None
    try:
        return Answer.from_json(data)
    except HandoffError as exc:
        raise VerifyError(f"the target's rehearsal answer is malformed: {exc}") from None


def _top(package: str) -> str:
    return package.replace("-", "_").split(".")[0]

"""The rehearsal's answer: its outcome vocabulary, the state of one run, and the JSON it returns.

Pure: no vLLM, no torch. The tool reads the same outcome strings (`analysis/rehearse.py`).
"""

import time

PASSED = "passed"
FAILED = "failed"  # speculators' code path raised, or returned wrong data
CANNOT = "cannot_rehearse"  # a stand-in does not fit this vLLM, or speculators' code was not reached
# The installed vLLM has no model class for the architecture: a fact about that vLLM (the model
# does not load there, patched or not), neither speculators' fault nor a stand-in's.
NO_MODEL_CLASS = "no_model_class"
TIMEOUT = "timeout"  # the run ran out of time (a busy machine, or a hang): no verdict, like CANNOT
ERROR = "error"  # a bug of the rehearsal itself
OUTCOMES = (PASSED, FAILED, CANNOT, NO_MODEL_CLASS, TIMEOUT, ERROR)


class CannotRehearse(Exception):
    """A stand-in no longer matches the vLLM code it replaces (not a speculators failure)."""


class NoModelClass(Exception):
    """vLLM's model registry has no class for the architecture (told before anything is stood in)."""

    def __init__(self, arch, first_release):
        self.arch, self.first_release = arch, first_release
        super().__init__(f"this vLLM has no model class for {arch} (it cannot load your model, patched or not; "
                         f"first release with it: {first_release})")

    def failure(self):
        return {"exception": str(self), "architecture": self.arch, "first_release": self.first_release}


class WrongOutput(Exception):
    """generate() returned, but its hidden states do not match a per-prompt forward pass."""


class RankFailed(Exception):
    """A rank raised and the generator was not told (vLLM read no reply from that rank): the
    rank's own failure is the run's (`releases/v1_tp/ranks.py`)."""


class ContractBroken(Exception):
    """speculators' code broke a contract of vLLM's that holds on a GPU and that a stand-in
    enforces on CPU (raised where the real thing would fail): a failure of speculators, not of the
    stand-in that raises it."""


class Drained(BaseException):
    """Raised by the in-process worker inbox when empty, to leave the real busy loop.

    BaseException on purpose: WorkerProc.worker_busy_loop calls dequeue outside its
    `except Exception` block, so this propagates out of the loop untouched.
    """


class Run:
    """What one rehearsal has learnt so far; the answer is built from it at any point."""

    def __init__(self, t0=None):
        self.t0 = time.monotonic() if t0 is None else t0
        self.stage = "start"
        self.iterations = 0
        self.captured = {}
        self.checks = []
        self.real = []
        self.stood_in = []
        self.tmpdir = None
        self.versions = {"speculators": None, "vllm": None}
        self.extra = {}
        # The live objects of the run (stand-ins, generator), released at shutdown.
        self.standins = None
        self.generator = None

    def count_forward(self):
        """One forward pass of the model over the scheduled tokens (the stand-in runner reports it)."""
        self.iterations += 1

    def check(self, name, ok, detail=""):
        """Record one self-check; a mismatch means this vLLM cannot be rehearsed as it is."""
        self.checks.append({"check": name, "ok": bool(ok), **({"detail": detail} if detail and not ok else {})})
        if not ok:
            raise CannotRehearse(f"stand-in {name.split(' vs ')[0]} no longer matches vLLM's "
                                 f"{name.split(' vs ')[-1]}: {detail}")


def answer(run, ok, outcome, failure=None, **extra):
    if outcome not in OUTCOMES:
        raise ValueError(f"unknown outcome {outcome!r}")
    ans = {
        "ok": ok,
        "outcome": outcome,
        "stage": run.stage,
        "iterations": run.iterations,
        "captured": run.captured,
        "failure": failure,
        "real": list(run.real),
        "stood_in": list(run.stood_in),
        "checks": run.checks,
        "seconds": round(time.monotonic() - run.t0, 2),
    }
    ans.update(run.extra)
    ans.update(extra)
    return ans


def timed_out(run, seconds):
    """The answer when the session's watchdog fires (the run is abandoned, the process exits).

    Running out of time says nothing about speculators, wherever the run was (`stage` says where):
    on a busy machine a sound run takes longer; a hang looks the same from here. So it is no
    failure: the run could not finish, and a longer --timeout is the next step."""
    return answer(run, False, TIMEOUT, {
        "exception": f"cannot rehearse: timed out after {seconds:g} s (the machine is busy? pass --timeout)"})

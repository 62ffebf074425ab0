"""Each prompt's reference states, computed by a forked copy of this process while this one drives
the generator.

The reference (`common.reference_states`: the model's own forward over one prompt alone) puts as
many tokens through the model as the generator's forwards do: one after the other, they were
half of a rehearsal's work. Every call's prompts are known before the first call (the workload is
seeded), so once the generator has built its model, a child forked from this process computes
them all, call by call, on another core while this process runs speculators; each call's states
come back through a file in the run's folder, written whole and renamed into place. The child
runs the same code on the same model (the fork's copy of its pages, the same one thread), so the
states are bit for bit the ones this process would compute: `self_check` compares one prompt's
with a forward in this process on every run. Where the fork is not there (a platform without it)
the references are computed here, in turn, as before.

Only for a model in this process (the in-process worker); a world of worker processes computes its
unsharded reference in the parent as before.
"""

import os
import pickle
import signal
import sys
import time
import warnings

from .answer import CannotRehearse
from .families import common

# How often the parent looks for a call's file while the child computes it.
POLL_SECONDS = 0.005
_PR_SET_PDEATHSIG = 1


class Forked:
    """The child computing every call's references; `get(b)` waits for call b's."""

    def __init__(self, folder, model, base, layers, forward, calls):
        self.folder = folder
        self.args = (model, base, layers, forward)
        self.calls = calls
        self.pid = None
        self.forked = False

    def start(self):
        if not hasattr(os, "fork"):
            return self
        sys.stdout.flush()
        sys.stderr.flush()
        with warnings.catch_warnings():
            # Python 3.12+ warns of fork in a process with threads: the child touches none of
            # them (no lock of theirs, no queue, no vLLM engine), only the model and its folder.
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:
            _child(self.folder, self.args, self.calls)  # never returns
        self.pid, self.forked = pid, True
        return self

    def get(self, b):
        """Call b's references: [{layer: states}] per prompt, in the call's order."""
        if not self.forked:
            return _references(self.args, self.calls[b])
        return self._wait(b, f"call {b + 1}'s states")

    def scaled(self):
        """The first call's first prompt's reference with every attention scale changed (None:
        the model has no attention scale to change)."""
        if not self.forked:
            model, base, layers, forward = self.args
            return scaled_reference(model, base, self.calls[0][0], layers, forward)
        return self._wait("scaled", "the scaled reference")

    def _wait(self, b, what):
        path = _path(self.folder, b)
        failed = os.path.join(self.folder, "references-failed")
        while not os.path.exists(path):
            _raise_if_failed(failed)
            ended = self._ended()
            if ended is not None:
                # Looked at again: the child may have written its file, or its failure, and ended
                # between the looks above and the wait.
                if os.path.exists(path):
                    break
                _raise_if_failed(failed)
                raise CannotRehearse(f"the reference process ended before {what} ({ended})")
            time.sleep(POLL_SECONDS)
        with open(path, "rb") as f:
            return pickle.load(f)

    def _ended(self):
        """How the child ended (its wait status), or None while it runs."""
        if self.pid is None:
            return "wait status 0"
        try:
            done, status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:  # reaped by the kernel: this process ignores SIGCHLD
            done, status = self.pid, None
        if not done:
            return None
        self.pid = None
        return "its wait status unknown: SIGCHLD is ignored here" if status is None else f"wait status {status}"

    def done(self):
        """The forked child has computed every call's references (False where they are computed
        here, in turn)."""
        if not self.forked:
            return False
        return os.path.exists(_path(self.folder, len(self.calls) - 1))

    def close(self):
        pid, self.pid = self.pid, None
        if pid is None:
            return
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass


def _raise_if_failed(failed):
    if os.path.exists(failed):
        with open(failed, encoding="utf-8") as f:
            raise CannotRehearse(f"the reference forward failed: {f.read().strip()}")


def _references(args, prompts):
    model, base, layers, forward = args
    return [common.reference_states(model, base, p, layers, forward) for p in prompts]


def _save(value, path):
    with open(path + ".tmp", "wb") as f:
        pickle.dump(value, f, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(path + ".tmp", path)


# Every attention layer's scale times this, for the check's sensitivity (`run._sensitive`).
SCALE_CHANGE = 1.05


def scaled_reference(model, base, prompt, layers, forward):
    """The reference of `prompt` with every attention scale changed by SCALE_CHANGE (what a
    dropped q scaling does), the scales restored after."""
    impls = [m.impl for m in model.modules() if hasattr(getattr(m, "impl", None), "scale")]
    for impl in impls:
        impl.scale *= SCALE_CHANGE
    try:
        return common.reference_states(model, base, prompt, layers, forward) if impls else None
    finally:
        for impl in impls:
            impl.scale /= SCALE_CHANGE


def _path(folder, b):
    return os.path.join(folder, f"references-{b}.pt")


def _child(folder, args, calls):
    """In the forked child: every call's references to a file each, then exit without running
    anything of the parent's (no atexit, no buffered output of its)."""
    code = 1
    try:
        _die_with_parent()
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.dup2(null, 2)
        for b, prompts in enumerate(calls):
            _save(_references(args, prompts), _path(folder, b))
            if b == 0:
                model, base, layers, forward = args
                _save(scaled_reference(model, base, prompts[0], layers, forward), _path(folder, "scaled"))
        code = 0
    except BaseException as e:  # noqa: BLE001 - every failure goes to the parent as a file
        try:
            with open(os.path.join(folder, "references-failed.tmp"), "w", encoding="utf-8") as f:
                f.write(f"{type(e).__name__}: {e}")
            os.replace(os.path.join(folder, "references-failed.tmp"), os.path.join(folder, "references-failed"))
        except BaseException:  # noqa: BLE001
            pass
    finally:
        os._exit(code)


def _die_with_parent():
    """The child ends with the parent, however it ends (a watchdog's os._exit, a kill)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def self_check(run, forked, prompts, refs, model, base, layers, forward):
    """The forked child's states equal this process's for the call's shortest prompt."""
    import torch

    if not forked.forked:
        return
    i = min(range(len(prompts)), key=lambda k: len(prompts[k]))
    here = common.reference_states(model, base, prompts[i], layers, forward)
    same = sorted(here) == sorted(refs[i]) and all(torch.equal(here[k], refs[i][k]) for k in here)
    run.check("forked reference vs model forward in this process", same,
              f"prompt {i + 1}: the forked child's states differ from this process's")

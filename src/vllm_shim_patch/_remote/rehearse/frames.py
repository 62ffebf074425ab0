"""Where an exception was raised and which frames of speculators and vLLM it passed through.

Pure: the package roots are arguments (the run passes the installed ones), so this is tested
without vLLM. `classify` decides the outcome from where the exception was raised.
"""

import os
import traceback

from .answer import CANNOT, FAILED, WrongOutput

# Every file of this package is a stand-in or the rehearsal's own plumbing.
OWN_ROOT = os.path.dirname(os.path.abspath(__file__))


def _inside(path, root):
    return bool(root) and os.path.abspath(path).startswith(root + os.sep)


def frame(fs, root, base=None):
    """One frame as the report shows it: the file relative to the package's parent (or `base`)."""
    rel_base = os.path.dirname(root) if root else None
    fn = os.path.abspath(fs.filename)
    if not (rel_base and fn.startswith(rel_base + os.sep)):
        rel_base = base  # relative to vLLM's site-packages when outside the package
    rel = os.path.relpath(fn, rel_base) if rel_base and fn.startswith(rel_base + os.sep) else fn
    return {"file": rel, "line": fs.lineno, "code": (fs.line or "").strip(), "function": fs.name}


def last_frame_in(frames, root, base=None):
    if not root:
        return None
    for fs in reversed(frames):
        if _inside(fs.filename, root):
            return frame(fs, root, base)
    return None


def raised_in(path, speculators, vllm, own=OWN_ROOT):
    if _inside(path, speculators):
        return "speculators"
    if _inside(path, vllm):
        return "vllm"
    if _inside(path, own):
        return "rehearse-stand-in"
    return "other"


def message(exc, limit=500):
    msg = " | ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    return msg if len(msg) <= limit else msg[:limit - 3] + "..."


def describe(exc, speculators, vllm, own=OWN_ROOT):
    """The exception, the last speculators and vLLM frames it passed, and where it was raised."""
    frames = traceback.extract_tb(exc.__traceback__)
    base = os.path.dirname(vllm) if vllm else None
    raised = frames[-1] if frames else None
    where = raised_in(raised.filename, speculators, vllm, own) if raised is not None else "other"
    return {
        "exception": f"{type(exc).__name__}: {message(exc)}",
        "speculators_frame": last_frame_in(frames, speculators, base),
        "vllm_frame": last_frame_in(frames, vllm, base),
        "raised_frame": frame(raised, vllm if where == "vllm" else speculators, base) if raised else None,
        "raised_in": where,
    }


def classify(exc, stage, speculators, vllm, worker_exc=None, own=OWN_ROOT):
    """(outcome, failure) for an exception that ended the run.

    Set-up failures mean the stand-ins do not fit this vLLM. An exception raised on the worker
    and surfaced through collective_rpc is described from the worker's side."""
    failure = describe(exc, speculators, vllm, own)
    if stage == "setup":
        failure["exception"] = f"cannot rehearse on this vLLM: {failure['exception']}"
        return CANNOT, failure
    failure["side"] = "main"
    if worker_exc is not None and "Worker failed with error" in str(exc):
        surfaced = failure
        failure = describe(worker_exc, speculators, vllm, own)
        failure["side"] = "worker"
        failure["surfaced_as"] = surfaced
        if failure["speculators_frame"] is None:
            # Raised on the worker outside speculators' code (e.g. the runner's state error):
            # the speculators frame is the call that made the RPC.
            failure["speculators_frame"] = surfaced["speculators_frame"]
    if not isinstance(exc, WrongOutput) and failure.get("raised_in") == "rehearse-stand-in" \
            and not failure.get("speculators_frame"):
        return CANNOT, failure
    return FAILED, failure

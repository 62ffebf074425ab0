"""Rehearse speculators' own VllmHiddenStatesGenerator against the installed vLLM, on CPU.

Runs INSIDE the target interpreter, loaded by `session.py` (which owns stdout and the timeout):
standard library plus what the target has (vllm, torch, transformers, speculators); nothing of
vllm_shim_patch. `request(json)` reads the tool's request (`handoff.Request`), `prepare(request)`
runs before anything imports vLLM (environment, temp dir), `rehearse(request)` returns the answer
(`handoff.Answer`; the session writes its `to_json()`).

The package, one concern a module: `handoff` (the request, the workload and the answer, typed,
shared with the tool), `answer` (the exceptions that end a run, the run's state, its answer), `frames`
(where an exception was raised, the outcome it means), `workload` (the prompts, a value),
`model_folder` (the tiny checkpoint), `device` (device stand-ins), `families/` (per model
family: config, stand-ins, reference forward), `releases/` (per range of vLLM releases: executor,
worker and runner stand-ins), `selfcheck` (comparing stand-ins with vLLM's objects), `run`.

Never writes into site-packages (the session turns bytecode writing off); the model folder and
vLLM's cache live in a temp dir removed at the end.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
import traceback

from . import answer as _answer
from . import frames, releases, run as _run
from .answer import CANNOT, NO_MODEL_CLASS, PASSED, CannotRehearse, NoModelClass, Run
from .handoff import Answer, HandoffError, Request

RUN = Run()

ENVIRONMENT = (("VLLM_NO_USAGE_STATS", "1"), ("DO_NOT_TRACK", "1"), ("HF_HUB_OFFLINE", "1"),
               ("TRANSFORMERS_OFFLINE", "1"), ("TOKENIZERS_PARALLELISM", "false"))


def request(data: object) -> Request | Answer:
    """The tool's request, or the answer to one this rehearsal cannot read."""
    try:
        return Request.from_json(data)
    except HandoffError as e:
        return _answer.malformed(e)


def prepare(req: Request) -> None:
    """Before anything imports vLLM: one temp dir for everything the rehearsal writes (the model
    folder and vLLM's own cache), so it leaves no trace in the user's ~/.cache/vllm."""
    RUN.t0 = time.monotonic()
    tmp = tempfile.mkdtemp(prefix="vsp-rehearse-")
    RUN.tmpdir = tmp
    # Whatever torch and vLLM put in the temp folder (torch writes a module there at import, the
    # inductor cache lives there) goes inside ours, and is removed with it.
    inner = os.path.join(tmp, "tmp")
    os.mkdir(inner)
    os.environ["TMPDIR"] = tempfile.tempdir = inner
    os.environ["VLLM_CACHE_ROOT"] = os.path.join(tmp, "vllm-cache")
    # A model's remote code (a --model folder's tokenizer, a config stand-in) is copied into
    # transformers' module cache: ours, not ~/.cache/huggingface/modules.
    os.environ["HF_MODULES_CACHE"] = os.path.join(tmp, "hf-modules")
    if not req.verbose:
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    for k, v in ENVIRONMENT:
        os.environ.setdefault(k, v)
    # What a release adapter needs before vLLM reads it at import (Model Runner V2: Triton's
    # interpreter, and vLLM's Triton switch kept on without a GPU driver).
    os.environ.update(releases.environment())


def _cleanup_tmp():
    if RUN.tmpdir:
        shutil.rmtree(RUN.tmpdir, ignore_errors=True)
        RUN.tmpdir = None


def _roots() -> tuple[str | None, str | None]:
    def root(name: str) -> str | None:
        f = getattr(sys.modules.get(name), "__file__", None)
        return os.path.dirname(os.path.abspath(f)) if f else None

    return root("speculators"), root("vllm")


def timed_out(seconds: float) -> Answer:
    """The answer when the session's watchdog fires (the run is abandoned, the process exits)."""
    _cleanup_tmp()
    return _answer.timed_out(RUN, seconds)


def rehearse(req: Request) -> Answer:
    """Run the rehearsal; always returns an answer (a failure of ours is outcome "error")."""
    if RUN.tmpdir is None:
        prepare(req)
    try:
        _run.run(RUN, req)
        ans = _answer.answer(RUN, True, PASSED, None)
    except NoModelClass as e:
        ans = _answer.answer(RUN, False, NO_MODEL_CLASS, e.failure())
    except CannotRehearse as e:
        ans = _answer.answer(RUN, False, CANNOT, {"exception": f"cannot rehearse: {e}"})
    except Exception as e:  # noqa: BLE001
        traceback.print_exc()
        outcome, failure = frames.classify(e, RUN.stage, *_roots(), worker_exc=_run.worker_failure(RUN))
        outcome, failure = _run.rank_failure(RUN, outcome, failure)
        ans = _answer.answer(RUN, False, outcome, failure)
    try:
        _run.shutdown(RUN)
    except Exception:  # noqa: BLE001
        traceback.print_exc()
    _cleanup_tmp()
    return _answer.finished(ans, RUN)

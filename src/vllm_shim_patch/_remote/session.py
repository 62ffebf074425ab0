"""One target process for everything that imports vLLM: import check, the imports of other
packages, live signatures, rehearsal.

Importing vLLM costs seconds; apply's verification pays it once. Runs inside the target
interpreter: standard library only, nothing of vllm_shim_patch. Reads one JSON request on stdin,

    {"imports": {"modules": [...], "own": "speculators"} | null,
     "packages": {"modules": {module: [name, ...]}, "own": "speculators"} | null,
     "signatures": [qualname, ...] | null,
     "rehearse": the rehearsal's request (`rehearse/handoff.py`: Request.to_json) | null}

(the rehearsal is the package `rehearse/`, loaded by path like the scripts)

and writes exactly one JSON object to stdout with the same keys (null where not asked):
import_check's list, package_imports' answer, signature_probe's {"fatal", "results"}, rehearse's
answer. The steps run in that order: the other packages are imported before vLLM can touch them,
and the rehearsal patches vLLM classes, so it goes last.
"""

from __future__ import annotations

import os
import sys

sys.dont_write_bytecode = True  # never write .pyc into the target's site-packages

# The script's directory is sys.path[0]: drop it, so no file beside this script can shadow a
# module of the environment; the siblings are loaded by path under private names instead.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

import importlib.util  # noqa: E402
import json  # noqa: E402
import threading  # noqa: E402

# vLLM's logger and C extensions write to fd 1: keep a private copy of it for the answer.
_OUT_FD = os.dup(1)
os.dup2(2, 1)
sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
_LOCK = threading.Lock()
_ANSWER: dict[str, object] = {"imports": None, "packages": None, "signatures": None, "rehearse": None}


def _sibling(name):
    """A script beside this one (or a package: a folder), under a private name no module of the
    environment can have; a package is registered in sys.modules so its relative imports work."""
    path = os.path.join(_HERE, name)
    private = f"_vsp_remote_{name}"
    if os.path.isdir(path):
        spec = importlib.util.spec_from_file_location(private, os.path.join(path, "__init__.py"),
                                                      submodule_search_locations=[path])
    else:
        spec = importlib.util.spec_from_file_location(private, path + ".py")
    assert spec is not None and spec.loader is not None  # a path always has a spec and a loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[private] = module
    spec.loader.exec_module(module)
    return module


def _emit_and_exit(code):
    """Write the answer once and leave at once: vLLM leaves threads and atexit work behind,
    and a watchdog may fire while the main thread is stuck inside vLLM. The processes this one
    started (the rehearsal's vLLM worker processes) end with it."""
    with _LOCK:
        os.write(_OUT_FD, (json.dumps(_ANSWER, default=str) + "\n").encode())
        sys.stderr.flush()
        _end_children()
        os._exit(code)


def _end_children():
    """Every child process of this one that multiprocessing started, killed by its pid."""
    mp = sys.modules.get("multiprocessing")
    if mp is None:
        return
    import signal

    for child in mp.active_children():
        try:
            os.kill(child.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _watch_parent(parent, poll=1.0):
    """The tool that started this process is gone (killed): nobody reads the answer, so end
    everything now rather than at the watchdog."""
    import time

    while os.getppid() == parent:
        time.sleep(poll)
    with _LOCK:
        _end_children()
        os._exit(3)


def main():
    threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True, name="vsp-parent").start()
    request = json.loads(sys.stdin.read() or "{}")
    rehearse, rehearse_req = None, None
    if request.get("rehearse") is not None:
        rehearse = _sibling("rehearse")
        rehearse_req = rehearse.request(request["rehearse"])
        if isinstance(rehearse_req, rehearse.Answer):  # a request it cannot read: that is its answer
            _ANSWER["rehearse"], rehearse = rehearse_req.to_json(), None
        else:
            rehearse.prepare(rehearse_req)  # environment first: vLLM reads some of it at import
    if request.get("imports") is not None:
        _ANSWER["imports"] = _sibling("import_check").check(request["imports"])
    if request.get("packages") is not None:
        _ANSWER["packages"] = _sibling("package_imports").check(request["packages"])
    if request.get("signatures") is not None:
        _ANSWER["signatures"] = _sibling("signature_probe").probe_all(request["signatures"])
    if rehearse is not None and rehearse_req is not None:
        seconds = rehearse_req.timeout

        def watchdog():
            _ANSWER["rehearse"] = rehearse.timed_out(seconds).to_json()
            _emit_and_exit(0)

        timer = threading.Timer(seconds, watchdog)
        timer.daemon = True
        timer.start()
        answer = rehearse.rehearse(rehearse_req)
        timer.cancel()
        _ANSWER["rehearse"] = answer.to_json()
    _emit_and_exit(0)


if __name__ == "__main__":
    main()

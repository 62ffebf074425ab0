"""Import modules in THIS interpreter and report each: ok, missing dependency, or failed.

Standard library only, nothing of vllm_shim_patch: it runs inside the target environment.
Reads {"modules": [...], "own": "speculators", "location": site-packages} as JSON on stdin,
prints JSON. A module loaded from anywhere but `location` (a copy earlier on sys.path) is
"shadowed": the checks would be of another copy than the one patched. A module that raises is
sent with its exception as data (`exception`: type, message, where it was raised), so the tool
words what is wrong rather than the traceback's last line (pydantic ends its messages with a
help URL).
"""

import importlib
import importlib.util
import json
import os
import re
import sys
import time
import traceback

# A line that only points elsewhere (pydantic's "For further information visit URL", a bare URL):
# it says where to read about the error, not what the error is.
_POINTER = re.compile(r"^(for further information visit\s+)?\w+://\S+$", re.IGNORECASE)
_MAX_LINES = 12


def _expected(location, name):
    """The files `name` may be loaded from in the install being verified (module or package)."""
    base = os.path.join(location, *name.split("."))
    return [os.path.realpath(base + ".py"), os.path.realpath(os.path.join(base, "__init__.py"))]


def _shadowed(location, name, loaded):
    """The file `name` came from, when it is not the one in `location` (another copy earlier on
    sys.path, e.g. PYTHONPATH or the working folder); else None."""
    if not location:
        return None
    expected = _expected(location, name)
    if loaded is None or os.path.realpath(loaded) not in expected:
        # The file the patch wrote: a package's __init__.py when there is one, else the module.
        return {"module": name, "status": "shadowed", "loaded": loaded,
                "expected": expected[1] if os.path.exists(expected[1]) else expected[0]}
    return None


def _root(name, location):
    """The folder of top-level package `name` as this interpreter has it (None: not found)."""
    module = sys.modules.get(name)
    origin = getattr(module, "__file__", None)
    if origin is None:
        try:
            spec = importlib.util.find_spec(name)
        except Exception:  # noqa: BLE001  (a broken finder: no root, frames are named in full)
            spec = None
        origin = spec.origin if spec is not None and spec.has_location else None
    if origin is None and location:
        origin = os.path.join(location, name, "__init__.py")
    return os.path.dirname(os.path.abspath(origin)) if origin else None


def _raised_at(exc, roots):
    """file:line of the innermost frame inside one of `roots` (the package, vLLM), relative to
    the folder above that root; the innermost frame of all when none is inside them."""
    frames = traceback.extract_tb(exc.__traceback__)
    for fs in reversed(frames):
        path = os.path.abspath(fs.filename)
        for root in roots:
            if root and path.startswith(root + os.sep):
                return f"{os.path.relpath(path, os.path.dirname(root))}:{fs.lineno}"
    return f"{frames[-1].filename}:{frames[-1].lineno}" if frames else None


def exception(exc, own, location):
    """The exception as data: its type, the lines of its message that say what is wrong (blank
    lines and help pointers dropped), and where it was raised."""
    lines = [line.strip() for line in str(exc).splitlines()]
    meaningful = [line for line in lines if line and not _POINTER.match(line)]
    return {"type": type(exc).__name__, "message": "\n".join(meaningful[:_MAX_LINES]),
            "at": _raised_at(exc, [_root(own, location), _root("vllm", None)])}


def check(request):
    """Import each of request["modules"]; one result per module."""
    own = request["own"]
    location = request.get("location")
    results = []
    # The package itself first, found without running it: a shadow copy is seen even where
    # importing the modules fails for a missing dependency.
    try:
        spec = importlib.util.find_spec(own)
    except Exception:  # noqa: BLE001  (a broken finder: the imports below report it)
        spec = None
    # A namespace package has no file of its own: its modules are checked one by one below.
    if spec is not None and spec.has_location and location and request["modules"]:
        where = spec.origin
        top = _shadowed(location, own, where)
        if top is not None:
            # `expected` stays the package's own __init__: that is the file found elsewhere.
            return [{**top, "module": name, "expected": _expected(location, own)[1], "seconds": 0.0}
                    for name in request["modules"]]
    for name in request["modules"]:
        start = time.perf_counter()
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            missing = (exc.name or "").split(".")[0]
            # Only an absent distribution is "not installed"; a missing submodule of an installed
            # one (vllm.v99) is exactly the breakage this check is for.
            absent = bool(missing) and missing != own and importlib.util.find_spec(missing) is None
            status = "missing-dependency" if absent else "failed"
            results.append({"module": name, "status": status, "missing": missing,
                            "seconds": time.perf_counter() - start,
                            "exception": exception(exc, own, location),
                            "traceback": traceback.format_exc(limit=-8)})
        except BaseException as exc:  # a module may raise anything at import time, SystemExit included
            results.append({"module": name, "status": "failed", "error": f"{type(exc).__name__}: {exc}",
                            "seconds": time.perf_counter() - start,
                            "exception": exception(exc, own, location),
                            "traceback": traceback.format_exc(limit=-8)})
        else:
            loaded = getattr(module, "__file__", None)
            paths = list(getattr(module, "__path__", None) or ())
            if loaded is None and paths:  # a namespace package: where its folders are
                inside = [p for p in paths if os.path.realpath(p) == os.path.realpath(os.path.join(
                    location or "", *name.split(".")))]
                loaded = os.path.join(inside[0] if inside else paths[0], "__init__.py")
            wrong = _shadowed(location, name, loaded)
            results.append({**(wrong or {"module": name, "status": "ok"}), "seconds": time.perf_counter() - start})
    return results


def main():
    request = json.loads(sys.stdin.read())
    # Whatever the imported modules print (vLLM's logger, a CLI's help) must not corrupt our JSON:
    # keep the real stdout for the answer and point fd 1 and sys.stdout at stderr meanwhile.
    answer = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    answer.write(json.dumps(check(request)))
    answer.flush()


if __name__ == "__main__":
    main()

"""Import modules in THIS interpreter and report each: ok, missing dependency, or failed.

Standard library only, nothing of vllm_shim_patch: it runs inside the target environment.
Reads {"modules": [...], "own": "speculators"} as JSON on stdin, prints JSON.
"""

import importlib
import importlib.util
import json
import os
import sys
import time
import traceback


def check(request):
    """Import each of request["modules"]; one result per module."""
    own = request["own"]
    results = []
    for name in request["modules"]:
        start = time.perf_counter()
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            missing = (exc.name or "").split(".")[0]
            # Only an absent distribution is "not installed"; a missing submodule of an installed
            # one (vllm.v99) is exactly the breakage this check is for.
            absent = bool(missing) and missing != own and importlib.util.find_spec(missing) is None
            status = "missing-dependency" if absent else "failed"
            results.append({"module": name, "status": status, "missing": missing,
                            "seconds": time.perf_counter() - start,
                            "traceback": traceback.format_exc(limit=-8)})
        except BaseException as exc:  # a module may raise anything at import time, SystemExit included
            results.append({"module": name, "status": "failed", "error": f"{type(exc).__name__}: {exc}",
                            "seconds": time.perf_counter() - start,
                            "traceback": traceback.format_exc(limit=-8)})
        else:
            results.append({"module": name, "status": "ok", "seconds": time.perf_counter() - start})
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

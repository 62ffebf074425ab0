"""Import modules in THIS interpreter and report each: ok, missing dependency, or failed.

Standard library only, nothing of vllm_shim_patch: it runs inside the target environment.
Reads {"modules": [...], "own": "speculators"} as JSON on stdin, prints JSON.
"""

import importlib
import json
import sys
import time
import traceback


def main():
    request = json.loads(sys.stdin.read())
    own = request["own"]
    results = []
    for name in request["modules"]:
        start = time.perf_counter()
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            missing = (exc.name or "").split(".")[0]
            status = "failed" if missing == own or not missing else "missing-dependency"
            results.append({"module": name, "status": status, "missing": missing,
                            "seconds": time.perf_counter() - start,
                            "traceback": traceback.format_exc(limit=-8)})
        except BaseException as exc:  # a module may raise anything at import time, SystemExit included
            results.append({"module": name, "status": "failed", "error": f"{type(exc).__name__}: {exc}",
                            "seconds": time.perf_counter() - start,
                            "traceback": traceback.format_exc(limit=-8)})
        else:
            results.append({"module": name, "status": "ok", "seconds": time.perf_counter() - start})
    print(json.dumps(results))


main()

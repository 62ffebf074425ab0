"""Compile sources with THIS interpreter's grammar; report the ones that do not compile.

Standard library only, nothing of vllm_shim_patch: it runs inside the target environment, whose
Python decides what compiles (the tool may run an older or newer one). Nothing is executed.
Reads {"files": [[path, base64 of the bytes], ...]} as JSON on stdin, prints
{"python": "3.13.5", "errors": {path: message}}.
"""

import base64
import json
import sys


def main():
    request = json.loads(sys.stdin.read())
    errors = {}
    for path, data in request["files"]:
        try:
            # dont_inherit: this script's own __future__ flags must not change the grammar.
            compile(base64.b64decode(data), path, "exec", dont_inherit=True)
        except SyntaxError as exc:  # IndentationError and TabError too
            errors[path] = f"{exc.msg} (line {exc.lineno})" if exc.lineno else exc.msg
        except (ValueError, MemoryError, RecursionError) as exc:  # null bytes (< 3.12), too deep
            errors[path] = f"{type(exc).__name__}: {exc}"
    print(json.dumps({"python": ".".join(map(str, sys.version_info[:3])), "errors": errors}))


main()

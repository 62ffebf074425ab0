"""The tool's signature probe on many vLLM sources from one interpreter: a test helper.

Run by the vLLM 0.16.0 environment's interpreter (standard library, plus the heavy packages
every vLLM release imports from that environment). Importing torch and transformers is most of
a vLLM import's seconds and is the same for every release's source, so this process imports
them once; each source is then probed in a forked child (`signature_probe.probe_all` with the
source first on sys.path, as PYTHONPATH puts it for a process of its own), which leaves with its
answer, so no release's modules are seen by the next. tests/signatures/test_live_vllm016.py
checks that a forked answer equals the probe's own process for the installed release.

Reads {"probe": path of signature_probe.py, "names": [...], "preload": [module, ...],
"sources": {label: folder, or null for the installed vLLM}} on stdin; writes {label: answer}.
"""

import os
import sys

# As the probe does: nothing beside this script (the test modules) may shadow a module.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

import importlib  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import tempfile  # noqa: E402


def _probe(path):
    spec = importlib.util.spec_from_file_location("_vsp_signature_probe", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main():
    request = json.load(sys.stdin)
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # vLLM's logger writes to stdout: the answer has fd 1's copy to itself
    sys.stdout = sys.stderr
    probe = _probe(request["probe"])
    for name in request["preload"]:
        importlib.import_module(name)
    answers = {}
    with tempfile.TemporaryDirectory(prefix="vsp-forked-probe-") as tmp:
        for label, source in request["sources"].items():
            where = os.path.join(tmp, "answer.json")
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    if source:
                        sys.path.insert(0, source)
                    with open(where, "w", encoding="utf-8") as f:
                        json.dump(probe.probe_all(request["names"]), f)
                    code = 0
                finally:
                    sys.stdout.flush()
                    sys.stderr.flush()
                    os._exit(code)
            _, status = os.waitpid(pid, 0)
            if status != 0:
                answers[label] = {"fatal": {"module": "vllm", "traceback": f"the probe's child ended with {status}"}}
            else:
                with open(where, encoding="utf-8") as f:
                    answers[label] = json.load(f)
            if os.path.exists(where):
                os.unlink(where)
    json.dump(answers, out)
    out.flush()


if __name__ == "__main__":
    main()

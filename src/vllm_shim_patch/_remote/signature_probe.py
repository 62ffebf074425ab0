"""Report the signatures of named callables as this interpreter sees them.

Runs inside the target (ML) environment as `python signature_probe.py`, so it uses the standard
library only and nothing from vllm_shim_patch. Reads a JSON list of qualified names on stdin and
writes one JSON object to stdout:

    {"fatal": null | {"module": "vllm", "traceback": "..."},
     "results": {name: {"params": [{"name", "kind", "required"}, ...]} | {"error": "..."}}}

"fatal" means a top-level package (vllm) fails to import at all; per-name problems are errors.
"""

from typing import Any

import os
import sys

# The script's directory is sys.path[0]: drop it before importing anything else, so no file that
# lives beside this script can shadow a module of the standard library or of the environment.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

import importlib
import inspect
import json
import traceback

_VAR = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)


def _tail(limit=20):
    return "".join(traceback.format_exc().splitlines(keepends=True)[-limit:])


def _import_prefix(parts):
    """The longest importable module prefix of `parts` and its length; raises on a real failure."""
    for i in range(len(parts), 0, -1):
        name = ".".join(parts[:i])
        try:
            return importlib.import_module(name), i
        except ModuleNotFoundError as exc:
            # Only "this prefix is not a module" moves on; a missing dependency is an error.
            if exc.name and (name == exc.name or name.startswith(exc.name + ".")):
                continue
            raise
    raise LookupError("no importable module in " + ".".join(parts))


def _pydantic_extra(cls):
    """pydantic dataclasses take unknown keywords unless extra="forbid"; inspect does not say so."""
    cfg = getattr(cls, "__pydantic_config__", None)
    if (
        not isinstance(cls, type)
        or "__pydantic_validator__" not in dir(cls)
        or not isinstance(cfg, dict)
    ):
        return None
    if not hasattr(cls, "__dataclass_fields__"):
        return None
    extra = cfg.get("extra") or "ignore"
    return {"allow": "extra_data", "ignore": "ignored_extra"}.get(extra)


def _literal(value):
    """The default as source text when it is a plain literal (as the static reader writes it)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return repr(value)
    return None


def _probe(qualname):
    parts = qualname.split(".")
    try:
        obj, i = _import_prefix(parts)
    except Exception as exc:  # noqa: BLE001 - any import failure makes this name unknown
        return {"error": f"cannot import a module of {qualname}: {type(exc).__name__}: {exc}"}
    for attr in parts[i:]:
        try:
            obj = getattr(obj, attr)
        except Exception as exc:  # noqa: BLE001 - a module __getattr__ may raise anything
            return {"error": f"{qualname}: {type(exc).__name__}: {exc}"}
    if not callable(obj):
        return {"error": f"{qualname} is not callable ({type(obj).__name__})"}
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError) as exc:
        return {"error": f"no signature for {qualname}: {exc}"}
    params = [
        {
            "name": p.name,
            "kind": p.kind.name.lower(),
            "required": p.default is p.empty and p.kind not in _VAR,
            "default": _literal(p.default),
        }
        for p in sig.parameters.values()
    ]
    extra = _pydantic_extra(obj)
    if extra and not any(p["kind"] == "var_keyword" for p in params):
        params.append({"name": extra, "kind": "var_keyword", "required": False})
    return {"params": params}


def probe_all(names):
    """{"fatal": ..., "results": {name: ...}} for the qualified names in `names`."""
    names = [n for n in names if isinstance(n, str) and n]
    answer: dict[str, Any] = {"fatal": None, "results": {}}
    for top in dict.fromkeys(n.split(".")[0] for n in names):
        try:
            importlib.import_module(top)
        except (Exception, SystemExit):  # noqa: BLE001 - a broken import may even call sys.exit
            answer["fatal"] = {"module": top, "traceback": _tail()}
            break
    if answer["fatal"] is None:
        for name in names:
            try:
                answer["results"][name] = _probe(name)
            except (Exception, SystemExit) as exc:  # noqa: BLE001 - keep the other answers
                answer["results"][name] = {"error": f"{type(exc).__name__}: {exc}"}
    return answer


def main():
    # Whatever importing vLLM prints (its logger writes to stdout) must not corrupt the answer.
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    json.dump(probe_all(json.load(sys.stdin)), out)
    out.flush()


if __name__ == "__main__":
    main()

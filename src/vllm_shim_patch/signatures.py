"""Signatures of vLLM callables, to guard rewrite rules and to bind call sites.

Two sources with one interface: `LiveSignatures` asks the target interpreter (`inspect`), and
`StaticSignatures` reads vLLM's installed source (or wheel) without importing it. Both answer
`None` when they cannot decide: a guard must never act on a guess.
"""

from __future__ import annotations

import json
import subprocess
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from vllm_shim_patch._static_sigs import KW_ONLY as _KW_ONLY
from vllm_shim_patch._static_sigs import POS_ONLY, POS_OR_KW, VAR_KW, VAR_POS, Resolver, Unknown
from vllm_shim_patch.errors import SignatureError

__all__ = [
    "BindResult",
    "LiveSignatures",
    "Param",
    "Signature",
    "SignatureSource",
    "StaticSignatures",
]

PARAM_KINDS = (POS_ONLY, POS_OR_KW, VAR_POS, _KW_ONLY, VAR_KW)
PROBE = Path(__file__).parent / "_remote" / "signature_probe.py"


@dataclass(frozen=True)
class Param:
    name: str
    kind: str  # one of PARAM_KINDS: inspect.Parameter.kind.name.lower()
    required: bool


@dataclass(frozen=True)
class BindResult:
    status: str  # "ok" | "mismatch" | "unknown"
    reason: str  # "" when ok

    @property
    def ok(self) -> bool:
        return self.status == "ok"


_OK = BindResult("ok", "")


@dataclass(frozen=True)
class Signature:
    qualname: str
    params: tuple[Param, ...]  # a class: its constructor's, without self
    origin: str  # "vllm/v1/request.py:59" (static) or "live"

    def _param(self, name: str) -> Param | None:
        return next((p for p in self.params if p.name == name), None)

    def _has(self, kind: str) -> bool:
        return any(p.kind == kind for p in self.params)

    def accepts(self, name: str) -> bool:
        """Whether a keyword argument of that name binds (a **kwargs takes any name)."""
        param = self._param(name)
        if param is not None and param.kind in (POS_OR_KW, _KW_ONLY):
            return True
        return self._has(VAR_KW)

    def requires(self, name: str) -> bool:
        """Whether that parameter exists and has no default."""
        param = self._param(name)
        return param is not None and param.required

    def bind(
        self,
        n_positional: int,
        keywords: Sequence[str],
        star_args: bool = False,
        star_kwargs: bool = False,
    ) -> BindResult:
        """Check a call (`n_positional` positionals, these keyword names) against the signature.

        A `*args`/`**kwargs` splat at the call leaves the result "unknown" unless the explicit
        arguments already fail.
        """
        positional = [p for p in self.params if p.kind in (POS_ONLY, POS_OR_KW)]
        if n_positional > len(positional) and not self._has(VAR_POS):
            return _mismatch(
                f"too many positional arguments ({n_positional} given, {len(positional)} accepted)"
            )
        filled = {p.name for p in positional[:n_positional]}
        by_keyword = {p.name: p for p in self.params if p.kind in (POS_OR_KW, _KW_ONLY)}
        seen: set[str] = set()
        for name in keywords:
            if name in seen or (name in filled and name in by_keyword):
                return _mismatch(f"multiple values for argument {name!r}")
            seen.add(name)
            if name in by_keyword or self._has(VAR_KW):
                continue
            param = self._param(name)
            if param is not None and param.kind == POS_ONLY:
                return _mismatch(f"positional-only argument {name!r} passed as keyword")
            return _mismatch(f"unexpected keyword argument {name!r}")

        def unfilled(p: Param) -> bool:
            if not p.required or p.name in filled:
                return False
            if p.kind == POS_ONLY:
                return not star_args  # a keyword, even from **kwargs, cannot fill it
            if p.name in seen:
                return False
            return not star_kwargs if p.kind == _KW_ONLY else not (star_args or star_kwargs)

        missing = [p.name for p in self.params if unfilled(p)]
        if missing:
            quoted = ", ".join(repr(n) for n in missing)
            return _mismatch(f"missing required argument{'s' if len(missing) > 1 else ''} {quoted}")
        if star_args or star_kwargs:
            return BindResult("unknown", "*args/**kwargs at the call")
        return _OK


def _mismatch(reason: str) -> BindResult:
    return BindResult("mismatch", reason)


class SignatureSource(Protocol):
    kind: str  # "live" | "static"

    def get(self, qualname: str) -> Signature | None:
        """The signature, or None when it cannot be decided."""
        ...

    def get_many(self, qualnames: Iterable[str]) -> dict[str, Signature | None]: ...


class StaticSignatures:
    """Signatures read from vLLM's source with `ast`, importing nothing.

    `root` is a directory holding the `vllm/` package (e.g. site-packages) or a vLLM wheel.
    Modules are parsed on demand, once each.
    """

    kind = "static"

    def __init__(self, root: Path | str):
        root = Path(root)
        if not root.exists():
            raise SignatureError(f"no vLLM source at {root}: the path does not exist")
        try:
            self._resolver = Resolver(root)
        except (OSError, zipfile.BadZipFile) as exc:
            raise SignatureError(f"cannot read {root}: {exc}") from exc
        if not self._resolver.has_package("vllm"):
            hint = (
                " (give the directory that contains vllm/, not vllm/ itself)"
                if root.name == "vllm"
                else ""
            )
            raise SignatureError(f"no vllm package under {root}{hint}")
        self._cache: dict[str, Signature | None] = {}
        self._why: dict[str, str] = {}

    def get(self, qualname: str) -> Signature | None:
        if qualname not in self._cache:
            try:
                raw, origin = self._resolver.signature(qualname)
                self._cache[qualname] = Signature(qualname, tuple(Param(*p) for p in raw), origin)
            except Unknown as exc:
                self._cache[qualname] = None
                self._why[qualname] = str(exc)
            except RecursionError:
                self._cache[qualname] = None
                self._why[qualname] = "the source nests too deeply to follow"
        return self._cache[qualname]

    def get_many(self, qualnames: Iterable[str]) -> dict[str, Signature | None]:
        return {name: self.get(name) for name in qualnames}

    def unknown_reason(self, qualname: str) -> str | None:
        """Why `get(qualname)` gave None (after a get), else None."""
        return self._why.get(qualname)

    @property
    def parsed_modules(self) -> list[str]:
        """The modules read so far (lookups parse only what they need)."""
        return self._resolver.parsed_modules()


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
            for name, entry in self._probe(todo).items():
                if "params" in entry:
                    params = tuple(
                        Param(p["name"], p["kind"], bool(p["required"])) for p in entry["params"]
                    )
                    self._cache[name] = Signature(name, params, "live")
                else:
                    self._cache[name] = None
                    self._why[name] = str(entry.get("error", "no answer from the probe"))
        return {n: self._cache.get(n) for n in names}

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
                text=True,
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
        try:
            answer = json.loads(proc.stdout)
        except ValueError:
            answer = None
        if proc.returncode != 0 or not isinstance(answer, dict):
            tail = _tail(proc.stderr)
            raise SignatureError(
                f"signature probe failed {where} (exit code {proc.returncode})"
                + (f"\n{tail}" if tail else "")
            )
        fatal = answer.get("fatal")
        if fatal:
            tb = str(fatal.get("traceback", ""))
            last = tb.strip().splitlines()[-1] if tb.strip() else "no traceback"
            raise SignatureError(
                f"{fatal.get('module', 'vllm')} fails to import {where}: {last}\n{_tail(tb)}"
            )
        results = answer.get("results", {})
        return {n: results.get(n, {"error": "no answer from the probe"}) for n in names}


def _tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])

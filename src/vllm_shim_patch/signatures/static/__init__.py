"""Signatures read from vLLM's source with `ast`; nothing is imported.

The reader follows Python's own rules as far as they can be read off the source (imports,
re-exports, the MRO, dataclass-like code generation) and raises `Unknown` with a reason at the
first point where the runtime could differ from what the source says. `StaticSignatures` turns
`Unknown` into "no signature": a wrong guess here would make a guard drop an argument vLLM still
needs.

The layers, bottom up: the source itself (`vllm_source.VllmSource`: a folder or a wheel, opened
once), `scope` (what a body binds), `names` (imports, re-exports, attributes, the MRO), `ctors`
(generated constructors) and `resolver` (functions, and which constructor a class really has);
beside them `members` (whether a name exists and where a missing one went: typed `Existence`
answers for the audit and the guards, with `search`: byte searches of the whole tree) and
`cache` (answers kept on disk).
"""

from __future__ import annotations

import gc
import weakref
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from vllm_shim_patch.errors import SignatureError
from vllm_shim_patch.signatures.model import PARAM_KINDS, Param, Signature
from vllm_shim_patch.signatures.static.cache import SignatureCache
from vllm_shim_patch.signatures.static.members import Members
from vllm_shim_patch.signatures.static.resolver import Resolver
from vllm_shim_patch.signatures.static.scope import Unknown

__all__ = ["StaticSignatures"]

_NO_ANSWER = object()


class StaticSignatures:
    """Signatures read from vLLM's source with `ast`, importing nothing.

    `root` is a directory holding the `vllm/` package (e.g. site-packages) or a vLLM wheel.
    Modules are parsed on demand, once each. With `cache_dir`, answers are kept on disk for the
    next run while the source they were read from is unchanged (`static/cache.py`).
    """

    kind = "static"

    def __init__(self, root: Path | str, cache_dir: Path | str | None = None):
        root = Path(root)
        if not root.exists():
            raise SignatureError(f"no vLLM source at {root}: the path does not exist")
        try:
            self._resolver = Resolver(root)
        except (OSError, zipfile.BadZipFile) as exc:
            raise SignatureError(f"cannot read {root}: {exc}") from exc
        if not self._resolver.has_package("vllm"):
            self._resolver.names.close()
            hint = (
                " (give the directory that contains vllm/, not vllm/ itself)"
                if root.name == "vllm"
                else ""
            )
            raise SignatureError(f"no vllm package under {root}{hint}")
        self._cache: dict[str, Signature | None] = {}
        self._why: dict[str, str] = {}
        self._derived: set[str] = set()  # keys read from the source in this run (not the disk)
        self._root = root
        self._store = SignatureCache(Path(cache_dir), root) if cache_dir is not None else None
        self._batch = 0
        self._dirty = False
        self._members: Members | None = None
        if self._store is not None:
            # Weak: a cycle would keep every parsed module alive until the collector runs (~0.1 s
            # at exit over a cold run's trees) instead of freeing them when the reader goes.
            self._resolver.names.memo = weakref.ref(self)

    def get(self, qualname: str, fresh: bool = False) -> Signature | None:
        """`fresh`: read from the source, never from the on-disk cache (the answer is stored anew)."""
        return self._signature("signatures", qualname, qualname, self._resolver.signature, fresh)

    def get_bound(self, qualname: str) -> Signature | None:
        """The signature of method `a.b.C.m` as called on an instance of C (`obj.m(...)`): self
        bound, inherited methods found along the MRO. None when unknown (`bound_unknown_reason`)."""
        return self._signature("bound", f"bound:{qualname}", qualname, self._resolver.bound_signature)

    def _signature(self, table: str, key: str, qualname: str, resolve: Any, fresh: bool = False) -> Signature | None:
        if fresh and key not in self._derived:
            self._cache.pop(key, None)
        if key not in self._cache:
            stored = _NO_ANSWER if fresh else self._stored(table, qualname, _decode_signature)
            if fresh:
                self._derived.add(key)
            if stored is _NO_ANSWER:
                try:
                    raw, origin = resolve(qualname)
                    stored = Signature(qualname, tuple(Param(*p) for p in raw), origin)
                except Unknown as exc:
                    stored = str(exc)
                except RecursionError:
                    stored = "the source nests too deeply to follow"
                self._remember(table, qualname, _encode_signature(stored))
            if isinstance(stored, str):
                self._cache[key] = None
                self._why[key] = stored
            else:
                self._cache[key] = stored  # type: ignore[assignment]
        return self._cache[key]

    def get_many(self, qualnames: Iterable[str], fresh: bool = False) -> dict[str, Signature | None]:
        """`fresh`: every answer read from the source, none from the on-disk cache (verification:
        what a guard read from the cache is checked against the source, never against itself)."""
        # The cycle collector paused for the batch: it reads modules and builds scopes (long-lived,
        # no garbage cycles to speak of), and each full collection would walk every tree read so far.
        paused = gc.isenabled()
        gc.disable()
        self._batch += 1
        try:
            return {name: self.get(name, fresh) for name in qualnames}
        finally:
            self._batch -= 1
            if paused:
                gc.enable()
            self._flush()

    def defines(self, qualname: str) -> bool | None:
        """Whether class attribute `a.b.C.attr` exists, for a guard (None: cannot be told from the
        source): `Members.defines`."""
        stored = self._stored("defines", qualname, _decode_tristate)
        if stored is not _NO_ANSWER:
            return stored  # type: ignore[return-value]
        try:
            answer = self.members.defines(qualname)
        except RecursionError:
            answer = None
        self._remember("defines", qualname, answer)
        return answer

    # -- the on-disk cache (signatures/static/cache.py) ---------------------------------------

    def _stored(self, table: str, key: str, decode: Any) -> Any:
        if self._store is None or key not in self._store.table(table):
            return _NO_ANSWER
        return decode(key, self._store.table(table)[key])

    def _remember(self, table: str, key: str, value: Any) -> None:
        if self._store is not None:
            self._store.table(table)[key] = value
            self._dirty = True
            self._flush()

    def _flush(self) -> None:
        if self._store is not None and self._dirty and not self._batch:
            self._store.save(self._resolver.names.accessed)
            self._dirty = False

    def answers(self, name: str, version: str) -> dict[str, Any] | None:
        """A table of the on-disk cache for answers another check computes from `names` (None
        without a cache dir), valid under the same rule: every path it reads through `names` is
        recorded there. `version` names what else the answers depend on (that check's own code,
        the Python it runs on): a table kept under another version is emptied."""
        if self._store is None:
            return None
        table = self._store.table(name)
        if table.get("") != version:
            table.clear()
            table[""] = version
        return table

    def save_answers(self) -> None:
        """Write the tables `answers` gave (after a batch of new answers)."""
        self._dirty = True
        self._flush()

    @property
    def names(self) -> Any:
        """The module reader (`names.Names`) behind every answer."""
        return self._resolver.names

    @property
    def members(self) -> Members:
        """The existence and relocation checks over the same parsed modules (`static/members.py`):
        what the audit, the guards and verification ask whether a name exists or where it went."""
        if self._members is None:
            self._members = Members(self._resolver.names)
        return self._members

    def close(self) -> None:
        """Close the source (a wheel's zip); answers already read stay."""
        self._resolver.names.close()

    def __enter__(self) -> StaticSignatures:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def returns(self, qualname: str) -> str | None:
        """The vLLM class whose instance calling `qualname` gives (`get_pp_group` →
        `vllm.distributed.parallel_state.GroupCoordinator`; a class → itself), for following
        `get_pp_group().is_first_rank`. None when not one plain class (`returns_reason` says why)."""
        stored = self._stored("returns", qualname, _decode_returns)
        if stored is _NO_ANSWER:
            try:
                stored = [self._resolver.returns(qualname), ""]
            except Unknown as exc:
                stored = [None, str(exc)]
            except RecursionError:
                stored = [None, "the source nests too deeply to follow"]
            self._remember("returns", qualname, stored)
        answer, reason = stored  # type: ignore[misc]
        if reason:
            self._why[f"returns:{qualname}"] = reason
        return answer  # type: ignore[no-any-return]

    def returns_reason(self, qualname: str) -> str | None:
        """Why `returns(qualname)` gave None (after a returns), else None."""
        return self._why.get(f"returns:{qualname}")

    def unknown_reason(self, qualname: str) -> str | None:
        """Why `get(qualname)` gave None (after a get), else None."""
        return self._why.get(qualname)

    def bound_unknown_reason(self, qualname: str) -> str | None:
        """Why `get_bound(qualname)` gave None (after a get_bound), else None."""
        return self._why.get(f"bound:{qualname}")

    @property
    def parsed_modules(self) -> list[str]:
        """The modules read so far (lookups parse only what they need)."""
        return self._resolver.parsed_modules()


def _encode_signature(answer: Signature | str) -> dict[str, Any]:
    if isinstance(answer, str):
        return {"unknown": answer}
    params = [[p.name, p.kind, p.required, p.default] for p in answer.params]
    return {"params": params, "origin": answer.origin}


def _decode_signature(qualname: str, entry: Any) -> Signature | str | object:
    """The stored answer, or _NO_ANSWER for an entry of the wrong shape (it is read anew)."""
    if not isinstance(entry, dict):
        return _NO_ANSWER
    if isinstance(entry.get("unknown"), str):
        return entry["unknown"]
    params, origin = entry.get("params"), entry.get("origin")
    if not isinstance(params, list) or not isinstance(origin, str):
        return _NO_ANSWER
    out = []
    for p in params:
        if not (
            isinstance(p, list)
            and len(p) == 4
            and isinstance(p[0], str)
            and p[1] in PARAM_KINDS
            and isinstance(p[2], bool)
            and (p[3] is None or isinstance(p[3], str))
        ):
            return _NO_ANSWER
        out.append(Param(*p))
    return Signature(qualname, tuple(out), origin)


def _decode_tristate(_key: str, entry: Any) -> bool | None | object:
    return entry if entry is None or isinstance(entry, bool) else _NO_ANSWER


def _decode_returns(_key: str, entry: Any) -> list[Any] | object:
    if (
        isinstance(entry, list)
        and len(entry) == 2
        and (entry[0] is None or isinstance(entry[0], str))
        and isinstance(entry[1], str)
    ):
        return entry
    return _NO_ANSWER

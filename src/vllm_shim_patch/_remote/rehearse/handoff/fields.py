"""The handoff's checks of a JSON value: each names the field and what it held (`HandoffError`)."""

from __future__ import annotations

from typing import Any

JSONObject = dict[str, Any]


class HandoffError(ValueError):
    """A request or answer that is not what the other side sends: which field, and what it held."""


def get(data: JSONObject, key: str, kind: type | tuple[type, ...], what: str, *, optional: bool = False) -> Any:
    """`data[key]`, of type `kind` (None where `optional` and it is absent or null)."""
    if key not in data:
        if optional:
            return None
        raise HandoffError(f"{what}: no {key!r}")
    value = data[key]
    if value is None and optional:
        return None
    # bool is an int to Python, never to the other side of the handoff.
    if not isinstance(value, kind) or (isinstance(value, bool) and bool not in _kinds(kind)):
        raise HandoffError(f"{what}: {key!r} is {value!r}, not {_name(kind)}")
    return value


def _kinds(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def _name(kind: type | tuple[type, ...]) -> str:
    return " or ".join(k.__name__ for k in _kinds(kind))


def json_object(data: Any, what: str) -> JSONObject:
    if not isinstance(data, dict) or not all(isinstance(k, str) for k in data):
        raise HandoffError(f"{what}: {data!r} is not a JSON object")
    return data


def known(data: JSONObject, keys: tuple[str, ...], what: str) -> None:
    unknown = sorted(set(data) - set(keys))
    if unknown:
        raise HandoffError(f"{what}: unknown field {unknown[0]!r}")


def ints(value: Any, what: str) -> tuple[int, ...]:
    if not isinstance(value, (list, tuple)) or not all(isinstance(n, int) and not isinstance(n, bool) for n in value):
        raise HandoffError(f"{what}: {value!r} is not a list of integers")
    return tuple(value)


def strs(value: Any, what: str) -> tuple[str, ...]:
    if not isinstance(value, (list, tuple)) or not all(isinstance(s, str) for s in value):
        raise HandoffError(f"{what}: {value!r} is not a list of strings")
    return tuple(value)


def json_objects(value: Any, what: str) -> tuple[JSONObject, ...]:
    if not isinstance(value, (list, tuple)):
        raise HandoffError(f"{what}: {value!r} is not a list")
    return tuple(json_object(v, what) for v in value)

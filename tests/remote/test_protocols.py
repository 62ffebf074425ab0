"""Every release adapter and every model family of the rehearsal's tables is its protocol
(`_remote/rehearse/protocols.py`): each member there, functions with the same signature; and a
family module imports with the standard library only (the tool reads the table)."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
import typing

import pytest

from vllm_shim_patch._remote.rehearse import families, protocols, releases

# The annotations' runtime types (protocols.py's annotations are strings: `from __future__`).
_TYPES = {"str": str, "bool": bool, "list[str]": list, "tuple[str, ...]": tuple, "dict[str, Any]": dict,
          "dict[str, str]": dict,
          "dict[str, dict[str, Any]]": dict, "str | None": (str, type(None))}


def _members(protocol: type) -> tuple[dict[str, str], dict[str, inspect.Signature]]:
    """(data members with their annotations, methods with their signatures less `self`)."""
    data = dict(protocol.__annotations__)
    methods = {}
    for name, value in vars(protocol).items():
        if inspect.isfunction(value) and not name.startswith("_"):
            sig = inspect.signature(value)
            methods[name] = sig.replace(parameters=list(sig.parameters.values())[1:])
    return data, methods


def _shape(sig: inspect.Signature) -> list[tuple[str, object, object]]:
    return [(p.name, p.kind, p.default) for p in sig.parameters.values()]


def _problems(module: object, protocol: type) -> list[str]:
    data, methods = _members(protocol)
    out = []
    for name, annotation in data.items():
        if not hasattr(module, name):
            out.append(f"no {name}")
        elif not isinstance(getattr(module, name), _TYPES[annotation]):
            out.append(f"{name} is not {annotation}")
    for name, sig in methods.items():
        fn = getattr(module, name, None)
        if not callable(fn):
            out.append(f"no function {name}{sig}")
        elif _shape(inspect.signature(fn)) != _shape(sig):
            out.append(f"{name}{inspect.signature(fn)} is not {name}{sig}")
    return out


@pytest.mark.parametrize("module", list(families.FAMILIES.values()), ids=list(families.FAMILIES))
def test_every_family_module_is_a_family(module: object) -> None:
    assert _problems(module, protocols.Family) == []
    assert isinstance(module, protocols.Family)


@pytest.mark.parametrize("module", releases.ADAPTERS, ids=[a.NAME for a in releases.ADAPTERS])
def test_every_release_adapter_is_a_release_adapter(module: object) -> None:
    assert _problems(module, protocols.ReleaseAdapter) == []
    assert isinstance(module, protocols.ReleaseAdapter)


def test_a_missing_member_or_another_signature_is_named() -> None:
    import types

    llama = families.FAMILIES["llama"]
    broken = types.ModuleType("broken")
    vars(broken).update({k: v for k, v in vars(llama).items() if k != "SUMMARY"})
    broken.files = lambda config, extra: {}  # type: ignore[attr-defined]
    assert _problems(broken, protocols.Family) == [
        "no SUMMARY", "files(config, extra) is not files(config: 'dict[str, Any]') -> 'dict[str, str]'"]


def test_the_protocols_annotations_are_the_ones_checked() -> None:
    for protocol in (protocols.Family, protocols.ReleaseAdapter):
        assert set(protocol.__annotations__.values()) <= set(_TYPES)
    assert typing.get_type_hints(protocols.Family)["WRAPPER"] is bool


# Loads the family table by path, as the tool does, in an interpreter without site-packages, and
# lists what it imported beyond the standard library.
PROBE = """
import importlib.util, json, sys
before = set(sys.modules)
folder = sys.argv[1]
spec = importlib.util.spec_from_file_location("_vsp_probe_families", folder + "/__init__.py",
                                              submodule_search_locations=[folder])
table = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = table
spec.loader.exec_module(table)
new = sorted(m for m in set(sys.modules) - before if m.split(".")[0] not in sys.stdlib_module_names)
print(json.dumps({"families": sorted(table.FAMILIES), "imported": new}))
"""


def test_the_family_modules_import_with_the_standard_library_only() -> None:
    folder = inspect.getfile(families).rsplit("/", 1)[0]
    out = subprocess.run([sys.executable, "-I", "-S", "-c", PROBE, folder], capture_output=True, text=True,
                         check=True)
    answer = json.loads(out.stdout)
    assert answer["families"] == sorted(families.FAMILIES)
    assert [m for m in answer["imported"] if not m.startswith("_vsp_probe_families")] == []

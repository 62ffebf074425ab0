"""The engine's prefilter changes what is parsed, never what is planned.

A plan skips the files no rule can change: a file is parsed for the call rules only where it
names a rule's package and, as a word, one of its callables, and not at all where no call can
match and none of its regions' rules applies to the vLLM (their "not needed" sites come from
`ast`). On every file of the real speculators releases, for vLLM versions on each side of every
rule's `since` and with the guards the real vLLM 0.16.0 source answers, the prefiltered plan is
the full one (every file parsed, every call looked at), byte for byte, sites, statuses and reasons
included: what `audit` and `verify` read of a plan is in it.
"""

from __future__ import annotations

import zipfile

import pytest
import realdata
from packaging.version import Version

from vllm_shim_patch.rewrite.engine import Engine
from vllm_shim_patch.rules.loader import load_pack
from vllm_shim_patch.kinds import FileStatus

pytestmark = pytest.mark.slow  # the real wheels and the real vLLM source

# One on each side of every rule's `since` (0.10.0, 0.11.1, 0.12.0, 0.17.0, 0.24.0, 0.25.1, 0.33.0).
VERSIONS = ["0.11", "0.12", "0.17", "0.24", "0.25.1", "0.33"]


def _files(version: str) -> dict[str, bytes]:
    with zipfile.ZipFile(realdata.speculators_wheel(version)) as zf:
        return {n: zf.read(n) for n in sorted(zf.namelist()) if n.endswith(".py")}


def _plans(files: dict[str, bytes], **engine: object) -> tuple[list, list]:
    pack = load_pack()
    # No time limit: a loaded machine must not fail one side of the comparison alone.
    fast = Engine(pack.rules, compile_here=False, codemod_seconds=None, **engine)  # type: ignore[arg-type]
    full = Engine(pack.rules, compile_here=False, codemod_seconds=None, prefilter=False, **engine)  # type: ignore[arg-type]
    return ([fast.transform(data, path) for path, data in files.items()],
            [full.transform(data, path) for path, data in files.items()])


@pytest.mark.parametrize("speculators", realdata.SPECULATORS)
@pytest.mark.parametrize("vllm", VERSIONS)
def test_the_prefiltered_plan_is_the_full_plan(speculators: str, vllm: str) -> None:
    fast, full = _plans(_files(speculators), version=Version(vllm))
    assert fast == full
    assert any(r.status is FileStatus.CHANGED for r in fast)
    # And the plan of what it writes has nothing more to write (--check, a rehearsal's fixes).
    engine = Engine(load_pack().rules, version=Version(vllm), compile_here=False, codemod_seconds=None)
    again = [engine.transform(r.after, r.path) for r in fast if r.changed]
    assert [(r.path, r.status) for r in again] == [(r.path, FileStatus.UNCHANGED) for r in again]


@pytest.fixture(scope="module")
def guards() -> dict[str, object]:
    """The signatures and class facts the real vLLM 0.16.0 source gives the guards (as apply reads them)."""
    from vllm_shim_patch.signatures.static import StaticSignatures

    source = StaticSignatures(realdata.vllm_source(realdata.REFERENCE_VLLM))
    rules = load_pack().rules
    calls = {c for r in rules for c in r.calls} | {c for r in rules for c, _ in r.guard.accepts}
    names = sorted({n for r in rules for n in (*r.guard.defines, *r.guard.lacks)})
    return {"signatures": source.get_many(sorted(calls)), "facts": {n: source.defines(n) for n in names}}


@pytest.mark.parametrize("speculators", realdata.SPECULATORS)
def test_the_prefiltered_plan_is_the_full_plan_with_the_guards(speculators: str, guards: dict[str, object]) -> None:
    fast, full = _plans(_files(speculators), version=Version(realdata.REFERENCE_VLLM), **guards)
    assert fast == full
    assert any(r.status is FileStatus.CHANGED for r in fast)

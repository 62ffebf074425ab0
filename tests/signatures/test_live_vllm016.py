"""Static against live on the real vLLM 0.16.0 install: for every vLLM callable and method the
speculators 0.3.0 and 0.4.0 wheels use (the release matrix's tables), the signature read from
the installed source equals what `inspect` reports in the vLLM interpreter, parameter by
parameter (name, kind, required, and every default the source spells as a literal); the same
for every public class and function of vLLM's core modules; and for every release from 0.10.0 to
0.23.0 (later ones need Transformers v5), the release's own source imported by that interpreter:
one process imports what every release shares (torch, transformers) once and probes each source
in a forked child (forked_probe.py), checked equal to the probe's own process on the install.

Slow: the vLLM venv is built once and cached by tests/e2e/build_env.py.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import realdata
from sigcases import render
from test_release_matrix import FULL, RELEASES, REQUIRED, _is_method

from vllm_shim_patch.signatures import LiveSignatures, StaticSignatures
from vllm_shim_patch.signatures.live import PROBE

# One worker runs the whole module (pytest -n): its module-scoped fixtures are built once.
pytestmark = [pytest.mark.realvllm, pytest.mark.slow, pytest.mark.xdist_group("live-vllm016")]

BUILD_ENV = Path(__file__).parent.parent / "e2e" / "build_env.py"
FORKED_PROBE = Path(__file__).parent / "forked_probe.py"


@pytest.fixture(scope="module")
def vllm_python() -> str:
    proc = subprocess.run([sys.executable, str(BUILD_ENV), "--print-path"],
                          capture_output=True, text=True, timeout=3600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()[-1]


def test_static_equals_live_on_the_real_install(vllm_python: str) -> None:
    site = subprocess.run([vllm_python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          capture_output=True, text=True, check=True).stdout.strip()
    static = StaticSignatures(site)
    names = sorted(set(FULL) | set(REQUIRED))
    live = LiveSignatures(vllm_python).get_many(names)
    compared = literal_defaults = 0
    for name in names:
        s, lv = static.get(name), live[name]
        if lv is None:
            # Only a name 0.16.0 lacks may be unknown, and then it is unknown to both.
            assert s is None and static.members.exists(name, on_instance=_is_method(name)).found is False, name
            continue
        assert s is not None, (name, static.unknown_reason(name))
        assert [(p.name, p.kind, p.required) for p in s.params] == [
            (p.name, p.kind, p.required) for p in lv.params
        ], name
        # A default the source spells as a literal must be the live one; a computed default
        # (a constant's name, a factory) is None in the static answer by design.
        wrong = [(a.name, a.default, b.default) for a, b in zip(s.params, lv.params)
                 if a.default is not None and a.default != b.default]
        assert wrong == [], name
        literal_defaults += sum(p.default is not None for p in s.params)
        compared += 1
    # Every callable of the tables exists in 0.16.0 (methods with self, as `inspect` sees them).
    assert compared == len(names) == 31
    assert literal_defaults > 200  # 229 on 0.16.0: the configs' and SamplingParams' literal defaults
    # The forked probe the releases below are read with answers as the probe's own process does.
    forked = LiveSignatures(vllm_python).accept(forked_answers(vllm_python, {"installed": None})["installed"], names)
    assert forked == live


# Beyond speculators' own use: every public top-level class and function of vLLM's core modules.
CORE_MODULES = ["vllm/config", "vllm/v1/core", "vllm/v1/request.py", "vllm/sampling_params.py",
                "vllm/outputs.py", "vllm/v1/engine", "vllm/v1/executor", "vllm/v1/structured_output",
                "vllm/sequence.py", "vllm/pooling_params.py", "vllm/v1/kv_cache_interface.py",
                "vllm/distributed/parallel_state.py"]


def _public_defs(site: Path) -> list[str]:
    names = []
    for entry in CORE_MODULES:
        path = site / entry
        for file in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            module = ".".join(file.relative_to(site).with_suffix("").parts).removesuffix(".__init__")
            for node in ast.parse(file.read_bytes()).body:
                if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and (
                    not node.name.startswith("_")
                ):
                    names.append(f"{module}.{node.name}")
    return names


def test_no_wrong_answer_on_vllm_core(vllm_python: str) -> None:
    site = Path(subprocess.run([vllm_python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               capture_output=True, text=True, check=True).stdout.strip())
    names = _public_defs(site)
    static = StaticSignatures(site)
    live = LiveSignatures(vllm_python, timeout=600).get_many(names)
    both = {n for n in names if live[n] is not None and static.get(n) is not None}
    wrong = {n: (render(static.get(n)), render(live[n])) for n in sorted(both)
             if [(p.name, p.kind, p.required) for p in static.get(n).params]
             != [(p.name, p.kind, p.required) for p in live[n].params]}
    assert wrong == {}
    # What static leaves unknown is said why (enum and Protocol classes, an @instrument'ed __init__).
    unknown = [n for n in names if live[n] is not None and static.get(n) is None]
    assert all(static.unknown_reason(n) for n in unknown)
    # 0.16.0: 301 names, 273 known and equal, 26 unknown statically (2 unknown live too).
    assert len(names) > 280 and len(both) > 0.9 * (len(both) + len(unknown))


# From 0.24.0 vLLM needs Transformers v5, which the 0.16.0 environment does not have: those
# releases are checked by the static matrix alone.
IMPORTABLE = [r for r in RELEASES if tuple(int(p) for p in r.split(".")) < (0, 24)]


# What every release's vLLM imports from the 0.16.0 environment: most of an import's seconds.
PRELOAD = ["torch", "transformers", "pydantic", "msgspec"]


def forked_answers(vllm_python: str, sources: dict[str, Path | None]) -> dict[str, dict]:
    """The probe's answer for each source (None: the installed vLLM), from one process."""
    request = {"probe": str(PROBE), "names": sorted(set(FULL) | set(REQUIRED)), "preload": PRELOAD,
               "sources": {label: None if root is None else str(root) for label, root in sources.items()}}
    proc = subprocess.run([vllm_python, str(FORKED_PROBE)], input=json.dumps(request), capture_output=True,
                          text=True, timeout=3600, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def release_answers(vllm_python: str) -> dict[str, dict]:
    return forked_answers(vllm_python, {r: realdata.vllm_source(r) for r in IMPORTABLE})


@pytest.mark.parametrize("release", IMPORTABLE)
def test_static_equals_live_on_every_release(vllm_python: str, release_answers: dict[str, dict],
                                             release: str) -> None:
    """Each release's own source imported by the vLLM 0.16.0 environment's interpreter (its torch,
    pydantic, msgspec): the `.py` files of the callables' modules import without the release's
    compiled parts, so `inspect` answers for the release's code."""
    root = realdata.vllm_source(release)
    names = sorted(set(FULL) | set(REQUIRED))
    live = LiveSignatures(vllm_python).accept(release_answers[release], names)
    static = StaticSignatures(root)
    got, want = {}, {}
    for name in names:
        s, lv = static.get(name), live[name]
        if lv is None:
            # Live cannot import or find it: only a name this release lacks.
            got[name], want[name] = static.members.exists(name, on_instance=_is_method(name)).found, False
            continue
        got[name] = [(p.name, p.kind, p.required) for p in s.params] if s else static.unknown_reason(name)
        want[name] = [(p.name, p.kind, p.required) for p in lv.params]
    assert got == want
    assert sum(live[n] is not None for n in names) >= 25  # 25 of 31 on 0.10.0, all 31 from 0.11.1

"""speculators 0.3.0 and 0.4.0 on the vLLM releases with a committed constraints file, really installed.

CI's releases (realdata.CI_RELEASES: 0.12.0, the reference, 0.34.0) are built on demand by
`tests/e2e/build_env.py --vllm X` (from a cold cache in CI: one shared uv cache, so each costs
little more than its own packages) and their outcome is asserted exactly, from the EXPECTED table
below: apply (the parity workload at tensor parallel size 1), the short workload at tensor
parallel size 2 (two worker processes of vLLM's executor), the short rehearsal of two MoE model
families at tensor parallel size 2 (Kimi-K2.5, Qwen3-MoE; the reference release's families are
test_families_realvllm.py's, its Kimi-K2.5 at sizes 2 and 8 test_topology_realvllm.py's)
and rollback through the CLI in a small venv that sees the release's vLLM, the verdict lines
included. Where a break no rule fixes yet stops the run, the table names that
break (it documents the state; a change in it, better or worse, fails the test until the table is
updated). Every other release with a committed constraints file runs only when asked for
(VSP_TEST_OTHER_RELEASES=1) and only where its venv is built (`--cached-only`; not built: skipped,
naming the command), asserting what holds on every release: status agrees with apply's exit code,
the rehearsal's verdict is its own, rollback restores RECORD-exact bytes. Asked for, not found:
what CI runs must not depend on which venvs a machine happens to hold (bench/matrix.py builds
them all). Their outcomes are documented by docs/compatibility.md (bench/matrix.py), not here.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import realdata
from conftest import DEFAULT_MODEL, EDITS, PARITY_PASSED, QUICK_PASSED, Sandbox, real_sandbox

E2E = Path(__file__).resolve().parent
RELEASES = sorted(
    (p.name[len("constraints-vllm-"):-len(".txt")] for p in E2E.glob("constraints-vllm-*.txt")),
    key=lambda v: tuple(int(n) for n in v.split(".")),
)
OTHER_RELEASES = [v for v in RELEASES if v not in realdata.CI_RELEASES]
OTHERS_ASKED = os.environ.get("VSP_TEST_OTHER_RELEASES") == "1"
# The oldest speculators (every rule applies) and the first written for newer vLLM.
SPECULATORS = (realdata.OLD_SPECULATORS, realdata.NEW_SPECULATORS)

RULES_ON_012 = (
    "worker-request-tracking", "worker-no-eagle3-gate", "worker-capture-hooks",
    "kv-cache-config-drop-specs", "scheduler-add-block-size",
    "cache-config-no-prefix-caching", "scheduler-config-add-is-encoder-decoder",
    "generator-abort-completed", "generator-results-by-request", "generator-flush-finished",
    "executor-sample-tokens", "collective-rpc-single-reply",
)
# speculators 0.4.0 has upstream's fixes of the vLLM breaks: what is left is the family rules (a
# language model that is the decoder stack, the capture hooks) and its string order of request ids.
RULES_ON_040 = ("worker-language-model-stack", "worker-capture-hooks", "generator-results-in-input-order")
# vLLM 0.34.0: Model Runner V1 is gone; the worker's rows through V2's own batch, the KV cache up
# front, and 0.33's moves and layout. generator-v1-runner is not needed there (no V1 to keep).
RULES_ON_034 = ('worker-request-tracking', 'worker-no-eagle3-gate', 'worker-capture-hooks', 'worker-v2-forward-batch', 'unify-hybrid-kv-cache-specs-move', 'get-kv-cache-groups-uniform-spec-move', 'kv-cache-config-drop-specs', 'get-kv-cache-config-from-groups-move', 'scheduler-add-block-size', 'cache-config-no-prefix-caching', 'generator-kv-cache-up-front', 'scheduler-config-add-is-encoder-decoder', 'request-drop-eos-token-id', 'generator-abort-completed', 'generator-results-by-request', 'generator-flush-finished', 'executor-sample-tokens', 'collective-rpc-single-reply', 'kv-cache-resolve-layout', 'generator-kernel-block-size', 'pydantic-rebuild-torch-namespace')
RULES_040_ON_034 = (
    "worker-language-model-stack", "worker-capture-hooks", "worker-v2-forward-batch",
    "unify-hybrid-kv-cache-specs-move", "get-kv-cache-groups-uniform-spec-move",
    "get-kv-cache-config-from-groups-move", "generator-kv-cache-up-front", "request-drop-eos-token-id",
    "generator-results-in-input-order", "kv-cache-resolve-layout", "generator-kernel-block-size",
    "pydantic-rebuild-torch-namespace",
)
# V2 orders every batch itself (decodes first): the runner's order differs in every step here.
V2_PARITY = PARITY_PASSED.replace("differed from scheduler order in 3", "differed from scheduler order in 9")
V2_QUICK = QUICK_PASSED.replace("differed from scheduler order in 0", "differed from scheduler order in 2")

# Each CI release also rehearses Kimi-K2.5 (MLA, MoE, a multimodal wrapper) and Qwen3-MoE (plain
# MoE) after apply at tensor parallel size 2 (experts, and MLA's heads, split across two ranks),
# the short workload (the stand-ins fit or not at build and first forward; every
# family's full workload is docs/compatibility.md's). The reference release's families are
# tests/e2e/test_families_realvllm.py's, every preset on both speculators.
FAMILIES = ("kimi-k2.5", "qwen3-moe")
QUICK = QUICK_PASSED
# `rehearse --tensor-parallel-size 2 --quick` after apply: two worker processes of vLLM's executor.
AT_TP2 = "; at tensor parallel size 2, pipeline parallel 1"
TP2 = f"{QUICK}{AT_TP2}{DEFAULT_MODEL}"
NO_KIMI = ("rehearsal not run: this vLLM has no model class for KimiK25ForConditionalGeneration (it cannot load "
           "your model, patched or not; first release with it: 0.15.0)")


def _families(*verdicts: tuple[str, int, str]) -> tuple[tuple[str, int, str], ...]:
    """(preset, exit code, the words after the architecture's verdict head) per family."""
    return verdicts


PASSING_FAMILIES = _families(
    ("kimi-k2.5", 0, f"{QUICK}{AT_TP2}; on a tiny KimiK25ForConditionalGeneration (--arch preset)"),
    ("qwen3-moe", 0, f"{QUICK}{AT_TP2}; on a tiny Qwen3MoeForCausalLM (--arch preset)"))


@dataclass(frozen=True)
class Outcome:
    apply_rc: int
    apply: str  # apply's verdict: its first line on stdout
    state: str  # `status --json`'s state after apply
    rules: tuple[str, ...]  # the rules apply recorded
    rehearse_rc: int
    rehearse: str
    rollback: str
    families: tuple[tuple[str, int, str], ...] = ()  # `rehearse --arch PRESET --quick` after apply


# (vLLM release, speculators release) -> today's outcome, for exactly CI's releases x SPECULATORS.
EXPECTED = {
    ("0.12.0", "0.3.0"): Outcome(
        0,
        "patched speculators 0.3.0 for vLLM 0.12.0: 21 edits in 2 files; vLLM 0.12.0 (static); "
        f"verification passed: 2 imports ok, 22 calls bind (live); {PARITY_PASSED}{DEFAULT_MODEL}",
        "patched", RULES_ON_012,
        0, f"speculators 0.3.0 on vLLM 0.12.0: {TP2}",
        "rolled back speculators 0.3.0 to original: restored 2 files; sha256 equal to RECORD for all 52 files",
        _families(("kimi-k2.5", 2, NO_KIMI), PASSING_FAMILIES[1]),
    ),
    ("0.12.0", "0.4.0"): Outcome(
        0,
        "patched speculators 0.4.0 for vLLM 0.12.0: 5 edits in 2 files; vLLM 0.12.0 (static); "
        f"verification passed: 2 imports ok, 25 calls bind (live); {PARITY_PASSED}{DEFAULT_MODEL}",
        "patched", RULES_ON_040,
        0, f"speculators 0.4.0 on vLLM 0.12.0: {TP2}",
        "rolled back speculators 0.4.0 to original: restored 2 files; sha256 equal to RECORD for all 54 files",
        _families(("kimi-k2.5", 2, NO_KIMI), PASSING_FAMILIES[1]),
    ),
    ("0.16.0", "0.3.0"): Outcome(
        0,
        f"patched speculators 0.3.0 for vLLM 0.16.0: {EDITS} edits in 2 files; vLLM 0.16.0 (static); "
        f"verification passed: 2 imports ok, 22 calls bind (live); {PARITY_PASSED}{DEFAULT_MODEL}",
        "patched", RULES_ON_012,
        0, f"speculators 0.3.0 on vLLM 0.16.0: {TP2}",
        "rolled back speculators 0.3.0 to original: restored 2 files; sha256 equal to RECORD for all 52 files",
    ),
    ("0.16.0", "0.4.0"): Outcome(
        0,
        "patched speculators 0.4.0 for vLLM 0.16.0: 5 edits in 2 files; vLLM 0.16.0 (static); "
        f"verification passed: 2 imports ok, 25 calls bind (live); {PARITY_PASSED}{DEFAULT_MODEL}",
        "patched", RULES_ON_040,
        0, f"speculators 0.4.0 on vLLM 0.16.0: {TP2}",
        "rolled back speculators 0.4.0 to original: restored 2 files; sha256 equal to RECORD for all 54 files",
    ),
    ("0.34.0", "0.3.0"): Outcome(
        0,
        "patched speculators 0.3.0 for vLLM 0.34.0: 31 edits in 3 files; vLLM 0.34.0 (static); "
        f"verification passed: 3 imports ok, 24 calls bind (live); {V2_PARITY}; on Model Runner V2{DEFAULT_MODEL}",
        "patched", RULES_ON_034,
        0, f"speculators 0.3.0 on vLLM 0.34.0: {V2_QUICK}; at tensor parallel size 2, pipeline parallel 1; "
        f"on Model Runner V2{DEFAULT_MODEL}",
        "rolled back speculators 0.3.0 to original: restored 3 files; sha256 equal to RECORD for all 52 files",
        _families(("kimi-k2.5", 0, f"{V2_QUICK}{AT_TP2}; on Model Runner V2; on a tiny KimiK25ForConditionalGeneration (--arch preset)"),
                  ("qwen3-moe", 0, f"{V2_QUICK}{AT_TP2}; on Model Runner V2; on a tiny Qwen3MoeForCausalLM (--arch preset)")),
    ),
    ("0.34.0", "0.4.0"): Outcome(
        0,
        "patched speculators 0.4.0 for vLLM 0.34.0: 16 edits in 3 files; vLLM 0.34.0 (static); "
        f"verification passed: 3 imports ok, 27 calls bind (live); {V2_PARITY}; on Model Runner V2{DEFAULT_MODEL}",
        "patched", RULES_040_ON_034,
        0, f"speculators 0.4.0 on vLLM 0.34.0: {V2_QUICK}; at tensor parallel size 2, pipeline parallel 1; "
        f"on Model Runner V2{DEFAULT_MODEL}",
        "rolled back speculators 0.4.0 to original: restored 3 files; sha256 equal to RECORD for all 54 files",
        _families(("kimi-k2.5", 0, f"{V2_QUICK}{AT_TP2}; on Model Runner V2; on a tiny KimiK25ForConditionalGeneration (--arch preset)"),
                  ("qwen3-moe", 0, f"{V2_QUICK}{AT_TP2}; on Model Runner V2; on a tiny Qwen3MoeForCausalLM (--arch preset)")),
    ),
}


def test_the_expected_outcomes_are_exactly_ci_s_releases_times_both_speculators() -> None:
    # Unit tier: a CI release is one the table names, for each speculators release it runs; the
    # other releases are the matrix's (docs/compatibility.md).
    assert sorted(EXPECTED) == sorted(itertools.product(realdata.CI_RELEASES, SPECULATORS))
    assert set(realdata.CI_RELEASES) <= set(RELEASES), "a CI release without a committed constraints file"


def _release_python(vllm: str, *, build: bool) -> Path:
    args = [] if build else ["--cached-only"]
    proc = subprocess.run([sys.executable, str(E2E / "build_env.py"), "--vllm", vllm, *args, "--print-path"],
                          capture_output=True, text=True, timeout=3600)
    if proc.returncode == 3 and not build:
        pytest.skip(proc.stderr.strip())
    assert proc.returncode == 0, proc.stderr[-3000:]
    return Path(proc.stdout.strip().splitlines()[-1])


def _verdict(proc: subprocess.CompletedProcess[str]) -> str:
    # The first line: on 0.33 the rehearsal's reason is pydantic's multi-line message, whose
    # "For further information" line follows.
    return (proc.stdout.strip().splitlines() or ["(no output)"])[0]


def _record_mismatches(sb: Sandbox) -> list[str]:
    wrong = []
    for path, digest in sb.record().items():
        algo, want = digest.split("=", 1)
        got = base64.urlsafe_b64encode(hashlib.new(algo, (sb.site / path).read_bytes()).digest()).rstrip(b"=")
        if got.decode() != want:
            wrong.append(path)
    return wrong


@dataclass(frozen=True)
class Run:
    applied: subprocess.CompletedProcess[str]
    state: str
    rules: tuple[str, ...]
    rehearsed: subprocess.CompletedProcess[str]
    families: tuple[tuple[str, subprocess.CompletedProcess[str]], ...]
    rolled: subprocess.CompletedProcess[str]
    files: int  # the files rollback compares with RECORD
    record_mismatches: list[str]


def _apply_rehearse_rollback(vllm: str, spec: str, tmp_path: Path, *, build: bool,
                             families: tuple[str, ...] = ()) -> Run:
    python = _release_python(vllm, build=build)
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               capture_output=True, text=True, check=True).stdout.strip())
    sb = real_sandbox(tmp_path, python, site, realdata.speculators_wheel(spec))
    applied = sb.run("--vllm-version", vllm, timeout=900)
    status = json.loads(sb.run("status", "--json").stdout)
    # Apply rehearsed the parity workload at size 1; the package as it left it, at size 2.
    rehearsed = sb.run("rehearse", "--tensor-parallel-size", "2", "--quick", timeout=900)
    # The MoE families at size 2: the experts and (Kimi-K2.5) MLA split across two ranks.
    each = tuple((name, sb.run("rehearse", "--arch", name, "--tensor-parallel-size", "2", "--quick", timeout=900))
                 for name in families)
    rolled = sb.run("rollback")
    # RECORD's hashed files but the console script in bin/ (outside the package's folder, which is
    # what rollback compares).
    files = sum(1 for path in sb.record() if not path.startswith("../"))
    return Run(applied, status["state"], tuple(status.get("rules") or ()), rehearsed, each, rolled, files,
               _record_mismatches(sb))


@pytest.mark.parametrize(("vllm", "spec"), sorted(EXPECTED))
@pytest.mark.realvllm
@pytest.mark.slow
def test_apply_rehearse_rollback_on_a_ci_release(vllm: str, spec: str, tmp_path: Path) -> None:
    want = EXPECTED[(vllm, spec)]
    run = _apply_rehearse_rollback(vllm, spec, tmp_path, build=True, families=tuple(f for f, _, _ in want.families))
    assert (run.applied.returncode, _verdict(run.applied)) == (want.apply_rc, want.apply), run.applied.stderr[-3000:]
    assert (run.state, run.rules) == (want.state, want.rules)
    assert (run.rehearsed.returncode, _verdict(run.rehearsed)) == (want.rehearse_rc, want.rehearse), \
        run.rehearsed.stderr[-3000:]
    assert (run.rolled.returncode, _verdict(run.rolled)) == (0, want.rollback), run.rolled.stderr[-3000:]
    assert run.record_mismatches == []
    got = [(name, r.returncode, r.stdout.strip().splitlines()[-1] if r.stdout.strip() else r.stderr[-3000:])
           for name, r in run.families]
    assert got == [(name, rc, f"speculators {spec} on vLLM {vllm}: {words}") for name, rc, words in want.families]


def test_every_ci_release_but_the_reference_rehearses_kimi_k25_and_a_moe_family() -> None:
    # Unit tier: the reference release's are test_families_realvllm.py's (every preset, both speculators).
    for (vllm, _spec), want in EXPECTED.items():
        assert [f for f, _, _ in want.families] == ([] if vllm == realdata.REFERENCE_VLLM else list(FAMILIES))


def _matrix_cell(vllm: str, spec: str) -> dict:
    data = json.loads((E2E.parents[1] / "docs" / "compatibility.json").read_text())
    return next(c for c in data["cells"] if (c["vllm"], c["speculators"]) == (vllm, spec))


@pytest.mark.parametrize(("vllm", "spec"), list(itertools.product(OTHER_RELEASES, SPECULATORS)))
@pytest.mark.realvllm
@pytest.mark.slow
@pytest.mark.skipif(not OTHERS_ASKED, reason="the releases outside CI's run with VSP_TEST_OTHER_RELEASES=1 "
                    "(docs/compatibility.md, from bench/matrix.py, covers them)")
def test_apply_rehearse_rollback_on_another_built_release(vllm: str, spec: str, tmp_path: Path) -> None:
    run = _apply_rehearse_rollback(vllm, spec, tmp_path, build=False)
    applied, rolled = _verdict(run.applied), _verdict(run.rolled)
    # What the compatibility matrix recorded of the same steps on the same release: a run that
    # differs is a regression, or the matrix is stale (bench/matrix.py --vllm X rewrites it).
    cell = _matrix_cell(vllm, spec)
    assert (run.applied.returncode, run.state, list(run.rules), run.rehearsed.returncode) == (
        int(cell["apply"]["rc"]), cell["state"], cell["rules"], int(cell["rehearse"]["rc"])), applied
    if run.state == "patched":
        assert applied.startswith(f"patched speculators {spec} for vLLM {vllm}: "), applied
        assert re.fullmatch(rf"rolled back speculators {re.escape(spec)} to original: restored \d+ files?; "
                            rf"sha256 equal to RECORD for all {run.files} files", rolled), rolled
    else:
        # Refused: every file as it was, nothing recorded.
        assert (run.state, run.rules, run.applied.returncode) == ("original", (), 1), applied
        assert applied.endswith(", nothing recorded") or applied.startswith("nothing written: "), applied
        assert rolled == (f"speculators {spec} is already at original: nothing to do "
                          f"(sha256 equal to RECORD for all {run.files} files)")
    assert run.rolled.returncode == 0, run.rolled.stderr[-3000:]
    assert _verdict(run.rehearsed).startswith(f"speculators {spec} on vLLM {vllm}: ")
    assert run.record_mismatches == []

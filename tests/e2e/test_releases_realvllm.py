"""speculators 0.3.0 on every other vLLM release with a committed constraints file, really installed.

For each release but the reference (tests/e2e/constraints-vllm-X.txt, built by
`python tests/e2e/build_env.py --vllm X`; a release whose venv is not built is skipped, naming
that command): apply, rehearse and rollback through the CLI in a small venv that sees the
release's vLLM, as on the reference. Each release's outcome today is asserted exactly, the
verdict lines included: where a break no rule fixes yet stops the run, the test names that break
(it documents the state; a change in it, better or worse, fails the test until this table is
updated). Rollback is RECORD-exact on every release.
"""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import realdata
from conftest import DEFAULT_MODEL, PARITY_PASSED, Sandbox, real_sandbox

E2E = Path(__file__).resolve().parent
OTHER_RELEASES = sorted(
    (p.name[len("constraints-vllm-"):-len(".txt")] for p in E2E.glob("constraints-vllm-*.txt")),
    key=lambda v: tuple(int(n) for n in v.split(".")),
)
OTHER_RELEASES.remove(realdata.REFERENCE_VLLM)

RULES_ON_012 = (
    "worker-request-tracking", "worker-no-eagle3-gate", "worker-capture-hooks",
    "llama-model-embed-input-ids", "kv-cache-config-drop-specs", "scheduler-add-block-size",
    "cache-config-no-prefix-caching", "scheduler-config-add-is-encoder-decoder",
    "generator-abort-completed", "generator-results-by-request", "generator-flush-finished",
    "executor-sample-tokens", "collective-rpc-single-reply",
)
# vLLM 0.24+ pulls transformers 5; on 5.20.2 (0.33.0's resolve) speculators' pydantic models fail
# in model_rebuild(force=True) on their torch.dtype annotations, so speculators does not import.
NO_TORCH = ("PydanticUndefinedAnnotation: name 'torch' is not defined")


@dataclass(frozen=True)
class Outcome:
    apply_rc: int
    apply: str  # apply's verdict: its first line on stdout
    state: str  # `status --json`'s state after apply
    rules: tuple[str, ...]  # the rules apply recorded
    rehearse_rc: int
    rehearse: str
    rollback: str


EXPECTED = {
    "0.12.0": Outcome(
        0,
        "patched speculators 0.3.0 for vLLM 0.12.0: 22 edits in 2 files; vLLM 0.12.0 (static); "
        f"verification passed: 2 imports ok, 22 calls bind (live); {PARITY_PASSED}{DEFAULT_MODEL}",
        "patched", RULES_ON_012,
        0, f"speculators 0.3.0 on vLLM 0.12.0: {PARITY_PASSED}{DEFAULT_MODEL}",
        "rolled back speculators 0.3.0 to original: restored 2 files; sha256 equal to RECORD for all 52 files",
    ),
    "0.33.0": Outcome(
        1,
        f"verification failed: import speculators.data_generation.custom_worker failed: {NO_TORCH} "
        "(raised at speculators/utils/pydantic_utils.py:35); restored 2 files, nothing recorded",
        "original", (),
        2, f"speculators 0.3.0 on vLLM 0.33.0: rehearsal could not run: cannot rehearse: {NO_TORCH}",
        "speculators 0.3.0 is already at original: nothing to do (sha256 equal to RECORD for all 52 files)",
    ),
}


def test_every_release_with_constraints_has_its_outcome_named() -> None:
    # Unit tier: a new constraints file is a new release to document here (and in the matrix).
    assert sorted(EXPECTED) == OTHER_RELEASES


def _release_python(vllm: str) -> Path:
    proc = subprocess.run([sys.executable, str(E2E / "build_env.py"), "--vllm", vllm, "--cached-only",
                           "--print-path"], capture_output=True, text=True, timeout=600)
    if proc.returncode == 3:
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


@pytest.mark.parametrize("vllm", OTHER_RELEASES)
@pytest.mark.realvllm
@pytest.mark.slow
def test_apply_rehearse_rollback_on_the_release(vllm: str, tmp_path: Path) -> None:
    python = _release_python(vllm)
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               capture_output=True, text=True, check=True).stdout.strip())
    sb = real_sandbox(tmp_path, python, site, realdata.speculators_wheel(realdata.OLD_SPECULATORS))
    want = EXPECTED[vllm]

    applied = sb.run("--vllm-version", vllm, timeout=900)
    assert (applied.returncode, _verdict(applied)) == (want.apply_rc, want.apply), applied.stderr[-3000:]
    status = json.loads(sb.run("status", "--json").stdout)
    assert (status["state"], tuple(status.get("rules") or ())) == (want.state, want.rules)

    rehearsed = sb.run("rehearse", timeout=900)
    assert (rehearsed.returncode, _verdict(rehearsed)) == (want.rehearse_rc, want.rehearse), rehearsed.stderr[-3000:]

    rolled = sb.run("rollback")
    assert (rolled.returncode, _verdict(rolled)) == (0, want.rollback), rolled.stderr[-3000:]
    assert _record_mismatches(sb) == []

"""The words of status, --check, apply, rollback, log and the rules commands, without a venv
(the slow tier sees the same lines through the CLI)."""

from __future__ import annotations

import pytest

from vllm_shim_patch.report import apply, check, status
from vllm_shim_patch.words import agree, listing, plural

W = "speculators 0.3.0"


@pytest.mark.parametrize(("line", "expected"), [
    pytest.param(status.busy(W, "42", "apply"),
                 f"busy: another patch-speculators (pid 42) is working on {W} right now (apply)", id="busy"),
    pytest.param(status.interrupted(W, "rollback", 7),
                 f"interrupted: a rollback of {W} (pid 7) was cut short; the next apply or rollback finishes "
                 f"or undoes it", id="interrupted"),
    pytest.param(status.not_tracked(W, []), f"not tracked: {W} was never patched by this tool; files match RECORD",
                 id="not-tracked"),
    pytest.param(status.not_tracked(W, ["a", "b"]),
                 f"not tracked: {W} was never patched by this tool; 2 files differ from RECORD: a, b",
                 id="not-tracked-off-record"),
    pytest.param(status.patched(W, "0.16", "static", "2026-01-02T03:04:05.123+00:00", ["r1", "r2"]),
                 f"patched: {W} for vLLM 0.16, guarded by static signatures, at 2026-01-02 03:04:05; rules: r1, r2",
                 id="patched"),
    pytest.param(status.patched(W, "0.16", "unguarded", "?", []),
                 f"patched: {W} for vLLM 0.16, unguarded, at ?; rules: (none)", id="patched-unguarded"),
    pytest.param(status.original(W), f"original: {W} as installed", id="original"),
    pytest.param(status.drifted("speculators", "0.3.0", "0.4.0", None, False),
                 "drifted: speculators 0.3.0 was tracked, 0.4.0 is installed now; apply records a reinstall as "
                 "the new original, rollback restores the original", id="drifted-version"),
    pytest.param(status.drifted("speculators", "0.3.0", "0.3.0", ["a"], True),
                 "drifted: 1 file changed since the last recorded state: a (edited by hand? they differ from "
                 "RECORD); apply records a reinstall as the new original, rollback restores the original",
                 id="drifted-edited"),
    pytest.param(check.not_patched(W, "0.16", ["a", "b"]),
                 f"{W} is not patched for vLLM 0.16: 2 files would change (a, b); run patch-speculators "
                 f"--vllm-version 0.16", id="check-pending"),
    pytest.param(check.for_a_human(W, "0.16", ["x:1: r"], 1),
                 f"x:1: r\n{W} is patched for vLLM 0.16, but 1 place needs a human (above)", id="check-human"),
    pytest.param(check.patched(W, "0.16", 7), f"{W} is patched for vLLM 0.16 (7 edits in place)", id="check-ok"),
    pytest.param(apply.declined(1), "nothing written: 1 change declined in review", id="declined"),
    pytest.param(apply.verification_failed("x", 2),
                 "verification failed: x; restored 2 files, nothing recorded", id="verify-failed"),
    pytest.param(apply.verdict("ok", None, "--no-rehearse"), "ok; rehearsal not run (--no-rehearse)",
                 id="verdict-no-rehearsal"),
    pytest.param(apply.rolled_back(W, "original", 0, "t"), f"{W} is already at original: nothing to do (t)",
                 id="rollback-nothing"),
    pytest.param(apply.rollback_tail(None, "0123456789abcdef"), "now at 0123456789ab", id="rollback-tail"),
    pytest.param(apply.history_line("0123456789abcdef", "2026-01-02T03:04:05+00:00", "s", ["patched"]),
                 "0123456789ab 2026-01-02 03:04:05 s [patched]", id="log-line"),
])
def test_line(line: str, expected: str) -> None:
    assert line == expected


def test_counting_words() -> None:
    assert [plural(1, "file"), plural(2, "file"), plural(2, "mismatch", "mismatches")] == [
        "1 file", "2 files", "2 mismatches"]
    assert [agree(1, "differs", "differ"), agree(3, "differs", "differ")] == ["differs", "differ"]
    assert listing(list("abcdefg")) == "a, b, c, d, e and 2 more"

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
    pytest.param(apply.verdict("ok", apply.could_not_rehearse("speculators 0.2.0 is not supported"), None),
                 "ok; rehearsal could not run: speculators 0.2.0 is not supported", id="verdict-could-not-rehearse"),
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


# The rehearsal's wrong sequences, from the rows it attributed to each prompt.
REHEARSAL_PROBLEMS = [
    ({"prompt": 4, "expected": 1945, "rows": 2047, "input_ids_of": 4, "segments": [[4, 0, 1945], [5, 0, 102]]},
     "prompt 4 has 1,945 own rows then 102 of prompt 5's"),
    ({"prompt": 7, "expected": 1700, "rows": 1598, "input_ids_of": 7, "segments": [[7, 0, 1598]]},
     "prompt 7 truncated 1,700 -> 1,598"),
    ({"prompt": 7, "expected": 300, "rows": 0, "input_ids_of": 7, "segments": []}, "prompt 7 empty"),
    ({"prompt": 5, "expected": 600, "rows": 600, "input_ids_of": 5, "segments": [[5, 102, 600]]},
     "prompt 5 shifted by 102 rows"),
    ({"prompt": 2, "expected": 200, "rows": 75, "input_ids_of": 10, "segments": [[10, 0, 75]]},
     "result 2 is prompt 10's"),
    ({"prompt": 3, "expected": 33, "rows": 33, "input_ids_of": -1, "segments": [[None, None, 33]]},
     "result 3 has the input_ids of no prompt"),
    ({"prompt": 1, "expected": 9, "rows": 9, "input_ids_of": 1, "segments": [[None, None, 9]]},
     "prompt 1 has 9 rows of no prompt"),
    ({"prompt": None, "expected": 8, "rows": 7, "count": True}, "7 results for 8 prompts"),
    # The real engine's check: each row nearest its own, but nearer another layer's forward.
    ({"prompt": 0, "expected": 20, "rows": 20, "input_ids_of": 0, "segments": [[0, 0, 20]], "layer": 1,
      "layer_of": 2}, "prompt 0's states for layer 1 are layer 2's"),
]


@pytest.mark.parametrize(("problem", "words"), REHEARSAL_PROBLEMS, ids=[w for _, w in REHEARSAL_PROBLEMS])
def test_a_wrong_sequence_in_words(problem: dict[str, object], words: str) -> None:
    from vllm_shim_patch.report.rehearse import problem as say

    assert say(problem) == words


def test_wrong_data_groups_prompts_wrong_alike_and_names_what_was_left_behind() -> None:
    from vllm_shim_patch.analysis.handoff import Answer, WorkloadDone, WrongCall
    from vllm_shim_patch.report.rehearse import wrong_data

    shifted = {"expected": 600, "rows": 600, "segments": [], "input_ids_of": None}
    answer = Answer(False, "failed", workload=WorkloadDone("parity", 6, 24, 9000), wrong=(
        WrongCall(1, 8, ({**shifted, "prompt": 5, "input_ids_of": 5, "segments": [[5, 102, 600]]},
                         {**shifted, "prompt": 6, "input_ids_of": 6, "segments": [[6, 102, 600]]}), 0, ()),
        WrongCall(3, 8, ({"prompt": 7, "expected": 300, "rows": 0, "input_ids_of": 7, "segments": []},), 2,
                  ("_captured_states",)),
    ))
    assert wrong_data(answer) == (
        "3 of 24 sequences wrong (call 1: prompts 5-6 shifted by 102 rows; call 3: prompt 7 empty; the model "
        "runner still holds 2 requests of earlier calls; the worker still holds _captured_states)")
    clean = Answer(False, "failed", workload=WorkloadDone("quick", 2, 4, 129), wrong=(WrongCall(2, 2, (), 1, ()),))
    assert wrong_data(clean) == ("all 4 sequences right, but state is left behind between calls (call 2: the "
                                 "model runner still holds 1 request of earlier calls)")

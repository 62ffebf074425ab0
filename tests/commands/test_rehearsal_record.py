"""What "patched" rests on: the rehearsal the overlay commit records (status, --check) and the
releases the compatibility matrix rehearsed (a newer vLLM is named as such)."""

from __future__ import annotations

import pytest
from packaging.version import Version

from vllm_shim_patch.fleet import rehearsed
from vllm_shim_patch.report import check, plan, status

W = "speculators 0.3.0"


@pytest.mark.parametrize(("trailers", "why"), [
    pytest.param({"rehearsal": "passed"}, None, id="passed"),
    pytest.param({"rehearsal": "could not run (cannot rehearse: no release adapter fits this vLLM (x))"},
                 "cannot rehearse: no release adapter fits this vLLM (x)", id="could-not-run"),
    pytest.param({"rehearsal": "not run (--no-rehearse)"}, "--no-rehearse", id="turned-off"),
    pytest.param({"rehearsal": "not run (--no-verify)"}, "--no-verify", id="no-verify"),
    pytest.param({"rehearsal": "not run"}, "not run", id="not-run"),
    pytest.param({"rehearsal": "timeout"}, "rehearsal timeout", id="timeout"),
    pytest.param({"rehearsal": "cannot_rehearse",
                  "verify": "partial: 22 calls bind (static); rehearsal could not run: cannot rehearse: X: y"},
                 "cannot rehearse: X: y", id="cannot-rehearse-in-words"),
    pytest.param({"rehearsal": "timeout", "verify": "passed: 22 calls bind; rehearsal timed out after 600 s"},
                 "timed out after 600 s", id="timeout-in-words"),
    # A commit from before the Rehearsal trailer: its verdict says it.
    pytest.param({"verify": "passed: 2 imports ok; rehearsal passed (parity)"}, None, id="old-passed"),
    pytest.param({"verify": "skipped (--no-verify)"}, "no rehearsal on record", id="old-skipped"),
])
def test_the_recorded_rehearsal_reads_back(trailers: dict[str, str], why: str | None) -> None:
    assert status.unrehearsed(trailers) == why


def test_status_says_a_patch_was_not_rehearsed_and_why() -> None:
    assert status.patched(W, "0.34", "live", "2026-01-02T03:04:05", ["r1"], not_rehearsed="--no-rehearse") == (
        f"patched (not rehearsed: --no-rehearse): {W} for vLLM 0.34, guarded by live signatures, at "
        f"2026-01-02 03:04:05; rules: r1")


def test_check_words_an_unrehearsed_patch() -> None:
    assert check.not_rehearsed(W, "0.34", 27, "cannot rehearse: x") == (
        f"{W} is patched for vLLM 0.34 (27 edits in place) but not rehearsed (cannot rehearse: x): run "
        f"patch-speculators rehearse, or pass --allow-unrehearsed to accept it")


def test_a_series_beyond_the_matrix_is_named_with_the_newest_rehearsed_release() -> None:
    # The newest release where something passed: a release the matrix ran and nothing passed on
    # (vLLM 0.34.0 before Model Runner V2) is no release the rules were rehearsed on.
    newest = [release for release, passed in rehearsed.REHEARSED if passed][-1]
    major, minor = (int(n) for n in newest.split(".")[:2])
    beyond = f"{major}.{minor + 1}.0"
    assert rehearsed.newer_than_rehearsed(beyond) == newest
    assert plan.newer_line(beyond) == (
        f"note: vLLM {beyond} is newer than any release these rules were rehearsed on ({newest})")
    # A patch release or nightly of the newest rehearsed series is that series.
    assert rehearsed.newer_than_rehearsed(f"{major}.{minor}.9.dev3+gabc") is None
    assert rehearsed.newer_than_rehearsed(f"{major}.{minor}") is None
    assert rehearsed.newer_than_rehearsed("0.16") is None
    assert plan.newer_line("0.16") is None
    assert rehearsed.newer_than_rehearsed("not-a-version") is None
    unrehearsed = [release for release, passed in rehearsed.REHEARSED if not passed]
    for release in unrehearsed:
        assert rehearsed.newer_than_rehearsed(release) == (newest if Version(release) > Version(newest) else None)

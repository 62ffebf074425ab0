"""Per-hunk review (`-i`): y/n/a/q on a real terminal, through a pty."""

from __future__ import annotations

import pytest
from conftest import GENERATOR, Sandbox, run_on_tty

# Every test here runs the CLI on a sandbox venv with the real speculators wheel.
pytestmark = pytest.mark.slow


def test_decline_one_hunk_accept_the_next(sandbox: Sandbox) -> None:
    # Hunks 1-5 are custom_worker.py's (the family rules, the worker's request tracking); 6 the
    # kv_cache_specs drop.
    code, screen = run_on_tty(sandbox, "y\n" * 5 + "n\n" + "y\n" * 6, "--vllm-version", "0.16", "-i")
    assert code == 0, screen
    assert "(1/12) apply this hunk? [y,n,a,q]" in screen
    assert "(12/12) apply this hunk? [y,n,a,q]" in screen
    assert "more hunk" not in screen  # what was declined makes no other edit needed
    text = (sandbox.site / GENERATOR).read_text()
    assert "kv_cache_specs=kv_cache_spec," in text  # declined
    assert "block_size=self.vllm_config.cache_config.block_size," in text  # accepted
    assert "patched speculators 0.3.0 for vLLM 0.16: 20 edits in 2 files" in screen


def test_quit_applies_nothing(sandbox: Sandbox) -> None:
    before = sandbox.snapshot()
    # q declines every hunk; the capture hooks declined, speculators' own forward is bound again and
    # its embedding rename needed: one more hunk, asked for on its own (and declined).
    code, screen = run_on_tty(sandbox, "q\nn\n", "--vllm-version", "0.16", "-i")
    assert code == 0, screen
    assert "(2/12)" not in screen
    assert screen.count("apply this hunk?") == 2
    assert "the declined hunks make other edits needed: 1 more hunk to review" in screen
    assert "(1/1) apply this hunk? [y,n,a,q]" in screen.split("1 more hunk to review", 1)[1]
    assert "-            else self.get_input_embeddings(input_ids)" in screen.split("1 more hunk to review", 1)[1]
    # Every edit of every hunk (21) but the sample_tokens pairing of the declined flush's step, and
    # the rename of the second round.
    assert "nothing written: 21 changes declined in review" in screen
    assert sandbox.snapshot() == before


def test_interactive_needs_a_terminal(sandbox: Sandbox) -> None:
    r = sandbox.run("--vllm-version", "0.16", "-i")
    assert r.returncode == 2
    assert r.stderr.strip() == "patch-speculators: error: --interactive needs a terminal on standard input"


def test_declining_a_needed_hunk_fails_verification_and_restores(sandbox: Sandbox) -> None:
    # Hunk 7 adds block_size to Scheduler(...): declined, the call is left as installed, and vLLM
    # 0.16.0 (its real source, static signatures) requires block_size. The other eleven are accepted;
    # the call's line is the one in the file verified (hunk 6 removed a line above it).
    import realdata

    sandbox.extra = ("--vllm-source", str(realdata.vllm_source(realdata.REFERENCE_VLLM)))
    before = sandbox.snapshot()
    code, screen = run_on_tty(sandbox, "y\n" * 6 + "n\n" + "y\n" * 5, "--vllm-version", realdata.REFERENCE_SERIES, "-i")
    assert code == 1, screen
    assert "scheduler-add-block-size" in screen.split("(7/12) apply this hunk?")[0].rsplit("(6/12)", 1)[1]
    assert screen.strip().splitlines()[-1] == (
        "verification failed: 1 call does not bind: "
        f"{GENERATOR}:147: vllm.v1.core.sched.scheduler.Scheduler: mismatch "
        "(missing required argument 'block_size'); scheduler-add-block-size was declined in review; "
        "restored 2 files, nothing recorded"
    )
    assert f"{GENERATOR}:147: vllm.v1.core.sched.scheduler.Scheduler: mismatch (missing required argument " \
           "'block_size'); scheduler-add-block-size was declined in review" in screen.splitlines()
    assert sandbox.snapshot() == before
    assert "patched" not in sandbox.run("status").stdout

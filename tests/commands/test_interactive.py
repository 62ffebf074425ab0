"""Per-hunk review (`-i`): y/n/a/q on a real terminal, through a pty."""

from __future__ import annotations

from conftest import GENERATOR, Sandbox, run_on_tty


def test_decline_one_hunk_accept_the_next(sandbox: Sandbox) -> None:
    # Hunk 1 is custom_worker.py's; hunk 2 the kv_cache_specs drop.
    code, screen = run_on_tty(sandbox, "y\nn\n" + "y\n" * 5, "--vllm-version", "0.16", "-i")
    assert code == 0, screen
    assert "(1/7) apply this hunk? [y,n,a,q]" in screen
    assert "(7/7) apply this hunk? [y,n,a,q]" in screen
    text = (sandbox.site / GENERATOR).read_text()
    assert "kv_cache_specs=kv_cache_spec," in text  # declined
    assert "block_size=self.vllm_config.cache_config.block_size," in text  # accepted
    assert "patched speculators 0.3.0 for vLLM 0.16: 6 edits in 2 files" in screen


def test_quit_applies_nothing(sandbox: Sandbox) -> None:
    before = sandbox.snapshot()
    code, screen = run_on_tty(sandbox, "q\n", "--vllm-version", "0.16", "-i")
    assert code == 0, screen
    assert "(2/7)" not in screen
    assert "nothing written: 7 changes declined in review" in screen
    assert sandbox.snapshot() == before


def test_interactive_needs_a_terminal(sandbox: Sandbox) -> None:
    r = sandbox.run("--vllm-version", "0.16", "-i")
    assert r.returncode == 2
    assert r.stderr.strip() == "patch-speculators: error: --interactive needs a terminal on standard input"

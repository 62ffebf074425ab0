"""--skip and --only: the rules a run uses, checked ids, recorded in the overlay and shown by status."""

from __future__ import annotations

import json

import pytest
from conftest import GENERATOR, WORKER, Sandbox

pytestmark = pytest.mark.slow

DATA = ("worker-request-tracking", "generator-abort-completed", "generator-results-by-request",
        "generator-flush-finished")


@pytest.mark.parametrize(("flag", "bad", "hint"), [
    ("--skip", "generator-abort-complete", "did you mean generator-abort-completed?"),
    ("--only", "worker-request", "did you mean worker-request-tracking?"),
])
def test_an_unknown_rule_id_is_exit_2_naming_the_close_ones(sandbox: Sandbox, reference_vllm_source: object,
                                                             flag: str, bad: str, hint: str) -> None:
    before = sandbox.snapshot()
    r = sandbox.run("--vllm-source", str(reference_vllm_source), flag, bad)
    assert r.returncode == 2
    assert r.stderr.splitlines()[-1] == (f"patch-speculators: error: {flag} {bad!r}: no loaded rule has this id; "
                                         f"{hint}")
    assert sandbox.snapshot() == before
    assert not sandbox.state.exists()
    r = sandbox.run("--json", "--vllm-source", str(reference_vllm_source), "audit", flag, bad)
    assert r.returncode == 2
    assert json.loads(r.stdout) == {"ok": False, "error": f"{flag} {bad!r}: no loaded rule has this id; {hint}",
                                    "kind": "UsageError"}


def test_an_id_far_from_any_lists_the_rules(sandbox: Sandbox, reference_vllm_source: object) -> None:
    r = sandbox.run("--vllm-source", str(reference_vllm_source), "--dry-run", "--skip", "zzz")
    assert r.returncode == 2
    assert r.stderr.splitlines()[-1].startswith(
        "patch-speculators: error: --skip 'zzz': no loaded rule has this id; the rules are worker-request-tracking, ")


def test_skip_leaves_the_rules_out_of_the_diff_and_the_record(sandbox: Sandbox, reference_vllm_source: object) -> None:
    src = str(reference_vllm_source)
    skip = [a for rule in DATA for a in ("--skip", rule)]
    dry = sandbox.run("--vllm-source", src, "--dry-run", *skip)
    assert dry.returncode == 0, dry.stderr
    # The vLLM rules' 6 and the family rules' 6 (speculators' own forward, unbound by the capture
    # hooks, is not edited).
    assert dry.stderr.splitlines()[-1] == "12 edits in 2 files; vLLM 0.16.0 (static)"
    assert "_set_request_metadata" not in dry.stdout and "prompt_lens" not in dry.stdout
    assert "llama-model-embed-input-ids" not in dry.stdout
    assert (f"{WORKER}:30: llama-model-embed-input-ids [not-needed, guarded] not needed: worker-capture-hooks "
            "leaves _patched_forward unbound and nothing in the module refers to it (would rename "
            "self.get_input_embeddings to embed_input_ids)") in dry.stderr.splitlines()
    r = sandbox.run("--vllm-source", src, *skip)
    assert r.returncode == 0, r.stderr
    assert "_set_request_metadata" not in (sandbox.site / WORKER).read_text()
    status = sandbox.run("--json", "status")
    data = json.loads(status.stdout)
    assert data["state"] == "patched" and data["skipped"] == list(DATA)
    assert sandbox.run("status").stdout.rstrip().endswith(f"; skipped: {', '.join(DATA)}")
    newest = sandbox.run("log").stdout.splitlines()[0]
    assert newest.endswith(f"patch speculators 0.3.0 for vLLM 0.16.0 (guarded by static signatures; skipped: "
                           f"{', '.join(DATA)}) [patched]")
    # --check is about the rules this run uses: patched without them, not patched with them.
    assert sandbox.run("--vllm-source", src, "--check", *skip).returncode == 0
    assert sandbox.run("--vllm-source", src, "--check").returncode == 1


def test_only_keeps_just_the_named_rules(sandbox: Sandbox, reference_vllm_source: object) -> None:
    dry = sandbox.run("--vllm-source", str(reference_vllm_source), "--dry-run", "--only", "kv-cache-config-drop-specs")
    assert dry.returncode == 0, dry.stderr
    assert dry.stderr.splitlines()[-1] == "1 edit in 1 file; vLLM 0.16.0 (static)"
    assert [line for line in dry.stdout.splitlines() if line.startswith("@@")] == [
        "@@ -136,7 +136,6 @@ kv-cache-config-drop-specs"]
    assert f"+++ b/{GENERATOR}" in dry.stdout

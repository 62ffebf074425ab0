"""The rehearsal on the real vLLM 0.16.0 install: speculators 0.3.0 stops at each real break, the
tool's own patch makes it pass, each fix taken back fails at its break, 0.4.0 passes as is.

Every run is the CLI in its own process against a small venv holding its own speculators (the
`real` fixture); the files of a partly patched package are the tool's own plan with one rule
declined, written into that venv.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import realdata
from conftest import DEFAULT_MODEL, EDITS, GENERATOR, PARITY_PASSED, WORKER, Sandbox, real_sandbox, run_on_tty

from vllm_shim_patch.commands.context import Context
from vllm_shim_patch.settings import Settings

pytestmark = [pytest.mark.realvllm, pytest.mark.slow]

PASSED = PARITY_PASSED + DEFAULT_MODEL
# The parity workload's prompt lengths, call by call (analysis/rehearse.py PARITY).
LENGTHS = [1945, 1700, 300, 2047, 1500, 1800, 650, 1200, 2000, 1900, 1800, 1700, 894, 600, 500, 400,
           2047, 2047, 2047, 2047, 301, 900, 700, 300, 120, 45, 200, 33, 150, 64, 99, 180, 27, 140, 75, 110,
           37, 21, 53, 18]
CAPTURED = {"1": [[n, 64] for n in LENGTHS], "2": [[n, 64] for n in LENGTHS]}
# speculators' own data bugs (rules/speculators-data.yaml), as they apply to 0.3.0.
DATA_RULES = ["worker-request-tracking", "generator-abort-completed", "generator-results-by-request",
              "generator-flush-finished"]


def rehearse(sb: Sandbox, *args: str) -> tuple[int, dict]:
    r = sb.run("rehearse", "--json", *args, timeout=600)
    assert r.stdout.strip(), r.stderr
    return r.returncode, json.loads(r.stdout)


def tree(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")}


def write_all_but(sb: Sandbox, *rules: str) -> None:
    """The package as the tool would patch it for the installed vLLM, except `rules`."""
    ctx = Context(Settings(python=str(sb.python), state_dir=str(sb.state)))
    files = {p: (sb.site / p).read_bytes() for p in ctx.target.python_files()}
    plan = ctx.plan(files)
    declined: frozenset[tuple[str, int, str]] = frozenset()
    while True:  # as -i does: a decline may make another of `rules` edit (declined in its turn)
        more = frozenset((s.path, s.line, s.rule_id) for s in plan.edited if s.rule_id in rules) - declined
        if not more:
            break
        declined |= more
        plan = ctx.plan(files, declined=declined)
    assert {d[2] for d in declined} == set(rules), f"{rules} edit nothing"
    for result in plan.changed:
        (sb.site / result.path).write_bytes(result.after)


def test_unpatched_stops_at_the_first_break_and_names_its_rule(real: Sandbox) -> None:
    r = real.run("rehearse", timeout=600)
    assert r.returncode == 1, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("  exception:   ValidationError: 1 validation error for SchedulerConfig | "
                               "is_encoder_decoder | Field required")
    assert lines[1:4] == [
        f"  speculators: {GENERATOR}:194: scheduler_config=SchedulerConfig(",
        "  vLLM:        -",
        f"  fix:         rule scheduler-config-add-is-encoder-decoder (not applied yet: it would edit {GENERATOR}:194)",
    ]
    assert lines[-1].startswith(f"speculators {realdata.OLD_SPECULATORS} on vLLM {realdata.REFERENCE_VLLM}: rehearsal failed in init at {GENERATOR}:194: "
                                "ValidationError")


def test_apply_rehearses_and_the_patched_package_passes(real: Sandbox) -> None:
    before = real.snapshot()
    r = real.run("--vllm-version", realdata.REFERENCE_SERIES, "--json", timeout=900)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["verify"].endswith(PASSED)
    files = tree(real.site)
    code, data = rehearse(real)
    assert tree(real.site) == files  # the rehearsal wrote nothing into site-packages (no bytecode either)
    assert code == 0, data
    assert (data["ok"], data["outcome"], data["iterations"], data["failure"]) == (True, "passed", 9, None)
    assert data["captured"] == CAPTURED
    assert data["max_rel_diff"] == 0.0  # the captured states equal a per-prompt forward of the same model
    assert data["steps"] == {"total": 9, "chunked": 3, "reordered": 3}
    assert data["workload"] == {"name": "parity", "calls": 6, "sequences": 40, "tokens": 32697, "reorder": [1, 128]}
    assert all(c["ok"] for c in data["checks"])
    assert [c["check"] for c in data["checks"]] == SELF_CHECKS
    assert (data["adapter"], data["family"], data["architecture"], data["model"]) == (
        "v1-multiproc", "llama", "LlamaForCausalLM", "default")
    assert data["layers"] == {"Attention": 4}  # vLLM's own attention layers, over the stand-in backend
    # The check is sensitive: a 5% change of the attention scale moves the states far past the tolerance.
    assert data["sensitivity"] > 0.05
    assert real.run("rollback").returncode == 0
    assert real.snapshot() == before


# Every self-check of a run, in order: the stand-ins against what they replace, then the check itself.
SELF_CHECKS = [
    # The platform (0.16's Platform has no current_device or manual_seed_all to check against).
    "kernel_warmup stand-in vs kernel_warmup", "get_cpu_memory stand-in vs get_cpu_memory",
    "platform stand-in set_device vs Platform.set_device",
    "platform stand-in is_pin_memory_available vs Platform.is_pin_memory_available",
    "GEMM stand-in vs torch.nn.functional.linear", "GEMM stand-in rows alone vs in a batch",
    "StandInAttentionImpl.__init__ vs AttentionImpl.__init__", "StandInAttentionImpl.forward vs AttentionImpl.forward",
    "mla_forward_impl vs MLAAttention.forward_impl", "mla_forward_impl vs MLAAttention.__init__",
    "StandInMLAImpl vs MLAAttention's use of self.impl", "StandInMLAImpl vs AttentionImplBase's defaults",
    # No MoE checks: the default Llama has no routed experts, so the MoE stand-in is not installed.
    "StandInModelRunner state guard vs GPUModelRunner.execute_model",
    "StandInModelRunner no-state sample_tokens vs GPUModelRunner.sample_tokens",
    "StandInModelRunner two-phase protocol vs GPUModelRunner.execute_model",
    "StandInModelRunner vs Worker's use of model_runner", "StandInModelRunner.load_model vs GPUModelRunner.load_model",
    "StandInModelRunner.initialize_kv_cache vs GPUModelRunner.initialize_kv_cache",
    "StandInModelRunner.execute_model vs GPUModelRunner.execute_model",
    "StandInModelRunner.sample_tokens vs GPUModelRunner.sample_tokens",
    "StandInModelRunner vs GPUModelRunner._update_states", "StandInModelRunner token order vs GPUModelRunner._prepare_inputs",
    "in-process queues vs MultiprocExecutor.collective_rpc", "InProcWorkerProc vs WorkerProc.__init__",
    "InProcWorkerProc._init_message_queues vs WorkerProc._init_message_queues",
    "BroadcastMQ vs WorkerProc.worker_busy_loop", "RehearsalWorker vs init_worker_distributed_environment",
    "RehearsalWorker.init_device vs Worker.init_device's workspace manager",
    "forked reference vs model forward in this process",
    "per-sequence check vs a capture one row off", "per-sequence check vs attention numerics",
]


# Each fix taken back alone, in the order the breaks surface: (rule, stage, exception, speculators
# frame's code, the rule the report names as the fix).
BREAKS = [
    ("scheduler-config-add-is-encoder-decoder", "init", "is_encoder_decoder | Field required",
     "scheduler_config=SchedulerConfig(", "scheduler-config-add-is-encoder-decoder"),
    ("kv-cache-config-drop-specs", "init",
     "TypeError: get_kv_cache_config_from_groups() got an unexpected keyword argument 'kv_cache_specs'",
     "kv_cache_config = get_kv_cache_config_from_groups(", "kv-cache-config-drop-specs"),
    ("scheduler-add-block-size", "init",
     "TypeError: Scheduler.__init__() missing 1 required positional argument: 'block_size'",
     "self.scheduler = Scheduler(", "scheduler-add-block-size"),
    # speculators' own forward, bound again without the capture hooks: the hooks are the fix (with
    # them, nothing calls that forward, and its rename is not needed).
    ("llama-model-embed-input-ids", "init", "AttributeError: 'LlamaModel' object has no attribute "
     "'get_input_embeddings'", "else self.get_input_embeddings(input_ids)", "worker-capture-hooks"),
    ("cache-config-no-prefix-caching", "generate-1", "AssertionError", "scheduler_output := self.scheduler.schedule()",
     None),
    # The reply is the worker's dict of rows by request id: [0] is a missing key.
    ("collective-rpc-single-reply", "generate-1", "KeyError: 0", "aux_hidden_states = captured_states_list[0]",
     "collective-rpc-single-reply"),
    # The first call of the parity workload takes two steps: the second execute_model raises.
    ("executor-sample-tokens", "generate-1", "RuntimeError: State error: sample_tokens() must be called after "
     "execute_model() returns None.", "self.executor.execute_model(scheduler_output)", "executor-sample-tokens"),
]


@pytest.mark.parametrize(("rule", "stage", "exception", "code", "fix"), BREAKS, ids=[b[0] for b in BREAKS])
def test_each_fix_taken_back_fails_at_its_break(real: Sandbox, rule: str, stage: str, exception: str, code: str,
                                                 fix: str | None) -> None:
    # The embedding rename is in speculators' own forward, which the capture hooks leave unbound:
    # it is a break only with them taken back too.
    also = ("worker-capture-hooks",) if rule == "llama-model-embed-input-ids" else ()
    write_all_but(real, rule, *also)
    rc, data = rehearse(real)
    assert rc == 1, data
    failure = data["failure"]
    assert (data["outcome"], data["stage"]) == ("failed", stage)
    assert exception in failure["exception"]
    assert failure["speculators_frame"]["code"] == code
    assert [f["rule"] for f in data["fixes"]] == ([fix] if fix else [])
    # With every rule, the rename is not needed (the hooks unbind speculators' forward).
    assert sorted(data["pending_rules"]) == sorted(also or [rule])
    if rule == "cache-config-no-prefix-caching":
        # Raised inside vLLM's scheduler: the report names vLLM's frame as well as speculators'.
        assert failure["vllm_frame"]["file"] == "vllm/v1/core/block_pool.py"
        assert failure["vllm_frame"]["code"] == "assert len(request.block_hashes) >= num_full_blocks"
    if rule in ("llama-model-embed-input-ids", "executor-sample-tokens"):
        assert failure["side"] == "worker"  # raised in the worker, surfaced through collective_rpc


def test_apply_restores_when_the_rehearsal_fails(real: Sandbox) -> None:
    """Declining custom_worker's forward hunks (the capture hooks, the Eagle3 gate, then the embedding
    rename the declined hooks make needed: speculators' own Llama forward stays bound, as released)
    leaves every call binding; only the rehearsal sees the break."""
    before = real.snapshot()
    # custom_worker's hunks in order: imports (gate, hooks), hooks' helpers, request tracking, gate
    # and binding, request tracking; then the generator's 7. The second round: the embedding rename.
    code, screen = run_on_tty(real, "n\nn\ny\nn\n" + "y\n" * 8 + "n\n", "--vllm-version", realdata.REFERENCE_SERIES, "-i",
                              timeout=900)
    assert code == 1, screen
    assert "the declined hunks make other edits needed: 1 more hunk to review" in screen
    assert (f"verification failed: rehearsal failed in init at {WORKER}:30: AttributeError: 'LlamaModel' object "
            f"has no attribute 'get_input_embeddings'{DEFAULT_MODEL}; restored 2 files, nothing recorded") in screen
    # With the hooks, speculators' forward never runs: they are the fix (their binding's line in the
    # files as written, the accepted request tracking above it).
    assert f"fix:         rule worker-capture-hooks (declined in review at {WORKER}:124)" in screen
    assert real.snapshot() == before


def test_no_rehearse_skips_it(real: Sandbox) -> None:
    r = real.run("--vllm-version", realdata.REFERENCE_SERIES, "--no-rehearse", timeout=900)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().endswith("verification passed: 2 imports ok, 22 calls bind (live); rehearsal not run (--no-rehearse)")
    # Where vLLM is installed, a patch never rehearsed is no health-check pass (issue 38).
    assert real.run("status").stdout.startswith(
        "patched (not rehearsed: --no-rehearse): speculators 0.3.0 for vLLM 0.16 (installed 0.16.0), guarded by "
        "static signatures")
    check = real.run("--vllm-version", realdata.REFERENCE_SERIES, "--check")
    assert (check.returncode, check.stdout) == (1, (
        f"speculators 0.3.0 is patched for vLLM 0.16 ({EDITS} edits in place) but not rehearsed (--no-rehearse): "
        "run patch-speculators rehearse, or pass --allow-unrehearsed to accept it\n"))
    allowed = real.run("--vllm-version", realdata.REFERENCE_SERIES, "--check", "--allow-unrehearsed")
    assert (allowed.returncode, allowed.stdout) == (0, f"speculators 0.3.0 is patched for vLLM 0.16 ({EDITS} edits in place)\n")


@pytest.mark.parametrize("version", realdata.SPECULATORS[1:])
def test_speculators_040_returns_results_out_of_order_until_patched(
        tmp_path: Path, vllm_venv_python: Path, vllm_site: Path, version: str) -> None:
    """0.4.0's vLLM breaks are fixed upstream; its string sort of request ids is not (12 prompts)."""
    sb = real_sandbox(tmp_path, vllm_venv_python, vllm_site, realdata.speculators_wheel(version))
    r = sb.run("rehearse", timeout=600)
    assert r.returncode == 1, r.stderr
    assert r.stdout.splitlines()[-1] == (
        f"speculators {version} on vLLM {realdata.REFERENCE_VLLM}: rehearsal failed: 10 of 40 sequences wrong (call 4: result 2 "
        f"is prompt 10's; result 3 is prompt 11's; result 4 is prompt 2's; result 5 is prompt 3's; 6 more){DEFAULT_MODEL}")
    assert (f"  fix:         rule generator-results-in-input-order (not applied yet: it would edit "
            f"{GENERATOR}:335)") in r.stdout
    # Apply's own parity rehearsal of 0.4.0 is test_releases_realvllm.py's: here the package it wrote.
    r = sb.run("--vllm-version", realdata.REFERENCE_SERIES, "--no-rehearse", timeout=900)
    assert r.returncode == 0, r.stderr
    rc, data = rehearse(sb)
    assert rc == 0, data
    assert data["versions"]["speculators"]["version"] == version
    assert data["captured"] == CAPTURED


def test_speculators_030_with_the_data_rules_skipped_returns_wrong_rows(real: Sandbox) -> None:
    """Every vLLM break fixed, speculators' own bugs left (--skip): the run finishes, the data is
    wrong, apply restores, and the report names the skipped rules as the fix."""
    skip = [a for rule in DATA_RULES for a in ("--skip", rule)]
    before = real.snapshot()
    r = real.run("--vllm-version", realdata.REFERENCE_SERIES, *skip, timeout=900)
    assert r.returncode == 1, r.stderr
    assert real.snapshot() == before  # restored
    for rule in DATA_RULES:
        assert f"  fix:         rule {rule} (skipped with --skip/--only: it would edit" in r.stdout + r.stderr, rule
    assert real.run("--vllm-version", realdata.REFERENCE_SERIES, "--no-rehearse", *skip, timeout=900).returncode == 0
    r = real.run("rehearse", *skip, timeout=600)
    assert r.returncode == 1, r.stderr
    last = r.stdout.splitlines()[-1]
    assert last.startswith(f"speculators 0.3.0 on vLLM {realdata.REFERENCE_VLLM}: rehearsal failed: 11 of 40 "
                           "sequences wrong (call 1: prompt 5 has 700 own rows then 650 of prompt 6's then 450 of "
                           "prompt 7's; "), last
    assert "the model runner still holds 2 requests of earlier calls" in last
    fixes = {line.split()[2]: line for line in r.stdout.splitlines() if line.startswith("  fix:")}
    assert set(DATA_RULES) <= set(fixes), r.stdout
    assert all("(skipped with --skip/--only: it would edit" in fixes[rule] for rule in DATA_RULES), r.stdout


# Each data fix taken back alone: the headline's words after "rehearsal failed: ".
DATA_BREAKS = [
    # The generator asks the worker for a method only the worker's rule adds.
    ("worker-request-tracking", "AttributeError: 'RehearsalWorker' object has no attribute '_set_request_metadata'"),
    ("generator-abort-completed", "3 of 40 sequences wrong (call 1: prompt 5 truncated 1,800 -> 700; call 2: "
     "prompt 4 truncated 894 -> 792; call 3: prompt 4 truncated 301 -> 4)"),
    # The worker is told no request's tokens: it has no rows to return.
    ("generator-results-by-request", "RuntimeError: Failed to capture hidden states from worker"),
    ("generator-flush-finished", "all 40 sequences right, but state is left behind between calls (call 2: the model "
     "runner still holds 3 requests of earlier calls; call 3: the model runner still holds 7 requests of earlier "
     "calls; call 4: the model runner still holds 11 requests of earlier calls; call 5: the model runner still "
     "holds 23 requests of earlier calls; call 6: the model runner still holds 25 requests of earlier calls)"),
]


@pytest.mark.parametrize(("rule", "words"), DATA_BREAKS, ids=[b[0] for b in DATA_BREAKS])
def test_each_data_fix_taken_back_fails(real: Sandbox, rule: str, words: str) -> None:
    write_all_but(real, rule)
    r = real.run("rehearse", timeout=600)
    assert r.returncode == 1, r.stdout + r.stderr
    assert words in r.stdout.splitlines()[-1], r.stdout
    # Named as the fix, or (a crash in code the rule does not edit) as the rule still pending.
    fix = [line for line in r.stdout.splitlines() if line.startswith("  fix:")]
    assert fix and rule in fix[0], r.stdout


def test_harder_chunking_than_the_default_still_passes(real: Sandbox) -> None:
    """The generator's token budget lowered by hand (2048 a step, not 8192): more prompts chunk."""
    assert real.run("--vllm-version", realdata.REFERENCE_SERIES, "--no-rehearse", timeout=900).returncode == 0
    gen = real.site / GENERATOR
    text = gen.read_text()
    assert "MIN_MAX_BATCHED_TOKENS = 8192" in text
    gen.write_text(text.replace("MIN_MAX_BATCHED_TOKENS = 8192", "MIN_MAX_BATCHED_TOKENS = 1024"))
    rc, data = rehearse(real)
    assert rc == 0, data
    assert data["steps"]["total"] > 9 and data["steps"]["chunked"] > 3, data["steps"]
    assert data["captured"] == CAPTURED


def test_quick_keeps_the_short_workload_and_says_so(real: Sandbox) -> None:
    assert real.run("--vllm-version", realdata.REFERENCE_SERIES, "--no-rehearse", timeout=900).returncode == 0
    r = real.run("rehearse", "--quick", timeout=600)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1] == (
        f"speculators 0.3.0 on vLLM {realdata.REFERENCE_VLLM}: rehearsal passed: 2 calls, 4 sequences (129 tokens) "
        "match a per-prompt "
        "forward row by row; chunked prefill in 0 of 2 steps; runner order differed from scheduler order in 0 "
        f"(--quick: short prompts only, no chunked prefill; run without --quick for speculators' own workload)"
        f"{DEFAULT_MODEL}")


def test_running_out_of_time_cannot_rehearse(real: Sandbox, tmp_path: Path) -> None:
    """One second is spent importing vLLM: that says nothing about speculators (exit 2, not 1)."""
    work = tmp_path / "tmp"
    work.mkdir()
    r = real.run("rehearse", "--json", "--timeout", "1", env={"TMPDIR": str(work)}, timeout=600)
    assert r.returncode == 2, r.stderr
    data = json.loads(r.stdout)
    assert (data["outcome"], data["stage"]) == ("timeout", "import")
    assert data["failure"]["exception"] == "cannot rehearse: timed out after 1 s (the machine is busy? pass --timeout)"
    assert list(work.iterdir()) == []  # the model folder and vLLM's cache are gone
    # No process of the target's interpreter is left running.
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True).stdout
    assert str(real.python) not in ps


def test_a_hang_in_speculators_code_path_runs_out_of_time_and_is_no_verdict(real: Sandbox, tmp_path: Path) -> None:
    """The scheduler never returns (a deadlock, or a machine too busy to finish): the watchdog ends
    the run, says it could not finish (a timeout is no failure of speculators), and the process
    leaves nothing behind."""
    import vllm_shim_patch

    assert real.run("--vllm-version", realdata.REFERENCE_SERIES, "--no-verify").returncode == 0  # speculators' init passes
    session = Path(vllm_shim_patch.__file__).parent / "_remote" / "session.py"
    driver = tmp_path / "hang.py"
    driver.write_text(
        "import importlib.util, time\n"
        f"spec = importlib.util.spec_from_file_location('vsp_session', {str(session)!r})\n"
        "session = importlib.util.module_from_spec(spec); spec.loader.exec_module(session)\n"
        "load = session._sibling\n"
        "def sibling(name):\n"  # vLLM is changed once the rehearsal has imported it, as a real run would
        "    module = load(name)\n"
        "    if name == 'rehearse':\n"
        "        import sys\n"
        "        device = sys.modules['_vsp_remote_rehearse.device']\n"
        "        standins = device.install\n"
        "        def install():\n"
        "            standins()\n"
        "            from vllm.v1.core.sched import scheduler\n"
        "            scheduler.Scheduler.schedule = lambda self: time.sleep(3600)\n"
        "        device.install = install\n"
        "    return module\n"
        "session._sibling = sibling\n"
        "session.main()\n")
    work = tmp_path / "tmp"
    work.mkdir()
    request = {"imports": None, "signatures": None,
               "rehearse": {"timeout": 60, "layers": [1, 2], "batches": [[37, 21]], "supported": ["0.3.0"]}}
    out = subprocess.run([str(real.python), str(driver)], input=json.dumps(request), capture_output=True, text=True,
                         timeout=600, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "TMPDIR": str(work)})
    answer = json.loads(out.stdout)["rehearse"]
    assert (answer["outcome"], answer["stage"]) == ("timeout", "generate-1"), answer
    assert answer["failure"]["exception"] == "cannot rehearse: timed out after 60 s (the machine is busy? pass --timeout)"
    assert list(work.iterdir()) == []


DRIFT = {
    # A new parameter upstream in the attention interface the stand-in backend implements.
    "attention-signature": ("from vllm.v1.attention import backend\n"
                            "def forward(self, layer, query, key, value, kv_cache, attn_metadata, output=None,\n"
                            "            output_scale=None, output_block_scale=None, cu_seqlens=None): pass\n"
                            "backend.AttentionImpl.forward = forward\n",
                            "stand-in StandInAttentionImpl.forward no longer matches vLLM's AttentionImpl.forward"),
    # The runner's state guard gone: the stand-in must not invent a protocol vLLM no longer has.
    "runner-guard": ("from vllm.v1.worker import gpu_model_runner\n"
                     "def execute_model(self, scheduler_output, intermediate_tensors=None): return None\n"
                     "gpu_model_runner.GPUModelRunner.execute_model = execute_model\n",
                     "stand-in StandInModelRunner state guard no longer matches vLLM's GPUModelRunner.execute_model"),
    # The worker starts using a runner method the stand-in lacks.
    "worker-runner-attr": ("from vllm.v1.worker import gpu_worker\n"
                           "def get_kv_cache_spec(self):\n"
                           "    self.model_runner.prepare_kv_spec_v2()\n"
                           "    return self.model_runner.get_kv_cache_spec()\n"
                           "gpu_worker.Worker.get_kv_cache_spec = get_kv_cache_spec\n",
                           "stand-in StandInModelRunner no longer matches vLLM's Worker's use of model_runner"),
}


@pytest.mark.parametrize("kind", sorted(DRIFT))
def test_stand_ins_are_checked_against_the_code_they_replace(real: Sandbox, tmp_path: Path, kind: str) -> None:
    """vLLM changed in memory under the rehearsal: it says it cannot rehearse, never pass or fail."""
    import vllm_shim_patch

    remote = Path(vllm_shim_patch.__file__).parent / "_remote" / "rehearse"
    patch, expected = DRIFT[kind]
    driver = tmp_path / "drift.py"
    driver.write_text(
        "import importlib.util, json, sys\n"
        f"spec = importlib.util.spec_from_file_location('_vsp_remote_rehearse', {str(remote / '__init__.py')!r},\n"
        f"                                              submodule_search_locations=[{str(remote)!r}])\n"
        "rehearse = importlib.util.module_from_spec(spec); sys.modules[spec.name] = rehearse\n"
        "spec.loader.exec_module(rehearse)\n"
        "req = rehearse.request({'timeout': 300, 'supported': ['0.3.0']})\n"
        "rehearse.prepare(req)\n" + patch +
        "print(json.dumps(rehearse.rehearse(req).to_json(), default=str))\n")
    out = subprocess.run([str(real.python), str(driver)], capture_output=True, text=True, timeout=600,
                         env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    answer = json.loads(out.stdout.strip().splitlines()[-1])
    assert answer["outcome"] == "cannot_rehearse", answer
    assert answer["failure"]["exception"].startswith(f"cannot rehearse: {expected}")

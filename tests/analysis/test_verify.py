"""Guards, verification and audit against the real vLLM 0.16.0 and 0.17.0 sources (static)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import realdata
from conftest import EDITS, GENERATOR, SANDBOX_IMPORTS, SANDBOX_IMPORTS_COUNT, WORKER, Sandbox

from vllm_shim_patch.signatures.model import BindResult


@pytest.fixture(scope="session")
def vllm017() -> Path:
    return realdata.vllm_source("0.17.0")


@pytest.mark.slow
def test_guard_keeps_eos_token_id_on_a_017_nightly_built_before_the_change(
        sandbox: Sandbox, reference_vllm_source: Path, tmp_path: Path) -> None:
    # A source that calls itself 0.17 but still takes eos_token_id (as a nightly between the
    # releases would): the rule's since says yes, the guard reads the source and says no.
    src = tmp_path / "vllm-src"
    shutil.copytree(reference_vllm_source / "vllm", src / "vllm")
    (src / "vllm" / "_version.py").write_text("__version__ = version = '0.17.0.dev1'\n")
    r = sandbox.run("--vllm-source", str(src), "--dry-run")
    assert r.returncode == 0, r.stderr
    assert "eos_token_id" not in r.stdout
    assert r.stdout.count("\n@@ ") + r.stdout.startswith("@@") == 12
    assert r.stderr.splitlines() == [
        "note: vLLM is not installed in " + str(sandbox.python)
        + ": rules selected for the vLLM source given with --vllm-source (0.17.0.dev1)",
        # speculators' own forward, which the capture hooks leave unbound: not edited.
        f"{WORKER}:30: llama-model-embed-input-ids [not-needed, guarded] not needed: worker-capture-hooks leaves "
        "_patched_forward unbound and nothing in the module refers to it (would rename self.get_input_embeddings "
        "to embed_input_ids)",
        # Model Runner V2's rules (vLLM 0.34): 0.16 still has V1, whose input_batch the worker reads.
        f"{WORKER}:67: worker-v2-forward-batch [not-needed, guarded] not needed for this vLLM: the worker still "
        "runs on Model Runner V1 (vllm.v1.worker.gpu_model_runner is there), whose input_batch it reads "
        "(generator-v1-runner keeps it on V1)",
        # vLLM 0.33.0's moves and KV cache layout: the guards read 0.16's source and say no.
        f"{GENERATOR}:130: unify-hybrid-kv-cache-specs-move [not-needed, guarded] not needed for this vLLM: "
        "kv_cache_utils still defines unify_hybrid_kv_cache_specs",
        f"{GENERATOR}:131: get-kv-cache-groups-uniform-spec-move [not-needed, guarded] not needed for this vLLM: "
        "kv_cache_utils still defines _get_kv_cache_groups_uniform_spec",
        f"{GENERATOR}:136: get-kv-cache-config-from-groups-move [not-needed, guarded] not needed for this vLLM: "
        "kv_cache_utils still defines get_kv_cache_config_from_groups",
        f"{GENERATOR}:166: generator-kv-cache-up-front [not-needed, guarded] not needed for this vLLM: "
        "CacheConfig does not take enable_extensible_kv_cache",
        f"{GENERATOR}:234: request-drop-eos-token-id [not-needed, guarded] not needed for this vLLM: "
        "Request still takes eos_token_id",
        f"{GENERATOR}:69: kv-cache-resolve-layout [not-needed, guarded] not needed for this vLLM: "
        "CacheConfig does not define get_resolved_kv_cache_layout",
        # generator-kernel-block-size: 0.16's attention backends name no preferred block size (0.18's do).
        f"{GENERATOR}:69: generator-kernel-block-size [not-needed, guarded] not needed for this vLLM: "
        "AttentionBackend does not define get_preferred_block_size",
        f"{GENERATOR}:69: generator-v1-runner [not-needed, guarded] not needed for this vLLM: "
        "Model Runner V1 is its only runner (VllmConfig does not define use_v2_model_runner)",
        # The transformers rules: the sandbox has no transformers (--no-deps), so `since` decides.
        "speculators/models/eagle.py:1: eagle-attention-mask-fallback [not-needed, unguarded] "
        "not needed before vLLM 0.24.0",
        "speculators/utils/pydantic_utils.py:27: pydantic-rebuild-torch-namespace [not-needed, unguarded] "
        "not needed before vLLM 0.24.0",
        "21 edits in 2 files; vLLM 0.17.0.dev1 (static)",
    ]


@pytest.fixture(scope="session")
def vllm033() -> Path:
    # Not in realdata.VLLM_SOURCES (each one there is read by many tests): only these read it.
    return realdata.vllm_source("0.33.0")


MOVES = ("unify-hybrid-kv-cache-specs-move", "get-kv-cache-groups-uniform-spec-move",
         "get-kv-cache-config-from-groups-move")


@pytest.mark.slow
def test_the_kv_cache_helpers_move_and_the_layout_is_resolved_on_033_not_on_016(sandbox: Sandbox, vllm033: Path,
                                                          reference_vllm_source: Path) -> None:
    moved = sandbox.run("--vllm-source", str(vllm033), "--dry-run", "--json")
    assert moved.returncode == 0, moved.stderr
    sites = [(s["rule"], s["line"], s["action"], s["message"], s["guarded"])
             for f in json.loads(moved.stdout)["files"] for s in f["sites"] if s["rule"] in MOVES]
    assert sites == [
        ("unify-hybrid-kv-cache-specs-move", 130, "edited",
         "move to vllm.v1.core.kv_cache_planning.unify_hybrid_kv_cache_specs", True),
        ("get-kv-cache-groups-uniform-spec-move", 131, "edited",
         "move to vllm.v1.core.kv_cache_planning._get_kv_cache_groups_uniform_spec", True),
        ("get-kv-cache-config-from-groups-move", 136, "edited",
         "move to vllm.v1.core.kv_cache_planning.get_kv_cache_config_from_groups", True),
    ]
    layout = [(s["rule"], s["action"], s["message"], s["guarded"])
              for f in json.loads(moved.stdout)["files"] for s in f["sites"] if s["rule"] == "kv-cache-resolve-layout"]
    assert layout == [("kv-cache-resolve-layout", "edited",
                       "resolve the KV cache layout before get_kv_cache_config_from_groups", True)]
    diff = sandbox.run("--vllm-source", str(vllm033), "--dry-run")
    # The layout is resolved as vLLM's engine core does, over the specs speculators asked for.
    assert ("         free_memory, _ = torch.cuda.mem_get_info()\n"
            "         cache_memory = int(free_memory * gpu_memory_utilization * CACHE_MEMORY_FRACTION)\n \n"
            "+        # vLLM 0.33+: the engine core resolves the KV cache layout before the KV cache is planned.\n"
            "+        from vllm.v1.attention.backends.utils import resolve_kv_cache_layout\n"
            "+        kv_cache_layout = resolve_kv_cache_layout(\n"
            "+            self.vllm_config,\n"
            "+            self.executor.get_supported_kv_cache_layouts(),\n"
            "+            [spec for specs in kv_cache_spec_list for spec in specs.values()],\n"
            "+        )\n"
            "+        self.executor.set_kv_cache_layout(\n"
            "+            kv_cache_layout.name, self.vllm_config.parallel_config.cp_kv_cache_interleave_size\n"
            "+        )\n"
            "         kv_cache_config = get_kv_cache_config_from_groups(\n") in diff.stdout
    assert ("-from vllm.v1.core.kv_cache_utils import (\n+from vllm.v1.core.kv_cache_planning import (\n"
            "     _get_kv_cache_groups_uniform_spec,\n     get_kv_cache_config_from_groups,\n"
            "     unify_hybrid_kv_cache_specs,\n") in diff.stdout
    kept = sandbox.run("--vllm-source", str(reference_vllm_source), "--dry-run", "--json")
    assert kept.returncode == 0, kept.stderr
    sites = [(s["rule"], s["action"], s["message"], s["guarded"])
             for f in json.loads(kept.stdout)["files"] for s in f["sites"] if s["rule"] in MOVES]
    assert sites == [
        (rule, "not-needed", f"not needed for this vLLM: kv_cache_utils still defines {name}", True)
        for rule, name in zip(MOVES, ("unify_hybrid_kv_cache_specs", "_get_kv_cache_groups_uniform_spec",
                                      "get_kv_cache_config_from_groups"))
    ]
    assert [(s["rule"], s["action"], s["message"]) for f in json.loads(kept.stdout)["files"] for s in f["sites"]
            if s["rule"] == "kv-cache-resolve-layout"] == [
        ("kv-cache-resolve-layout", "not-needed",
         "not needed for this vLLM: CacheConfig does not define get_resolved_kv_cache_layout")]


@pytest.mark.slow
def test_the_017_source_alone_selects_and_guards_the_rules(sandbox: Sandbox, vllm017: Path) -> None:
    r = sandbox.run("--vllm-source", str(vllm017), "--dry-run", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    sites = [(s["rule"], s["action"], s["guarded"]) for f in data["files"] for s in f["sites"]]
    # In each file the scoped rules of speculators-data.yaml run first; those with nothing of vLLM to
    # check are unguarded (decided by since).
    assert sites == [
        ("worker-request-tracking", "edited", True),
        ("worker-request-tracking", "edited", True),
        # The family rules: the gate (guarded by get_language_model), the capture hooks (speculators'
        # own fix, nothing of vLLM to check).
        ("worker-no-eagle3-gate", "edited", True),
        ("worker-no-eagle3-gate", "edited", True),
        ("worker-no-eagle3-gate", "edited", True),
        # The gate's rewrite already takes the decoder stack itself as the language model.
        ("worker-language-model-stack", "already", True),
        ("worker-capture-hooks", "edited", False),
        ("worker-capture-hooks", "edited", False),
        ("worker-capture-hooks", "edited", False),
        # speculators' own forward, unbound by the capture hooks: not edited.
        ("llama-model-embed-input-ids", "not-needed", True),
        # Model Runner V2's worker rule (vLLM 0.34): 0.17 still has V1.
        ("worker-v2-forward-batch", "not-needed", True),
        # vLLM 0.33.0's moves: 0.17 still has the names where speculators imports them.
        ("unify-hybrid-kv-cache-specs-move", "not-needed", True),
        ("get-kv-cache-groups-uniform-spec-move", "not-needed", True),
        ("get-kv-cache-config-from-groups-move", "not-needed", True),
        ("kv-cache-config-drop-specs", "edited", True),
        ("scheduler-add-block-size", "edited", True),
        ("cache-config-no-prefix-caching", "edited", True),
        # 0.17's CacheConfig has no extensible KV cache to turn off (vLLM 0.34's).
        ("generator-kv-cache-up-front", "not-needed", True),
        ("scheduler-config-add-is-encoder-decoder", "edited", True),
        ("request-drop-eos-token-id", "edited", True),
        ("generator-abort-completed", "edited", False),
        ("generator-abort-completed", "edited", False),
        ("generator-results-by-request", "edited", True),
        ("generator-results-by-request", "edited", True),
        ("generator-results-by-request", "edited", True),
        ("generator-flush-finished", "edited", False),
        ("generator-results-in-input-order", "already", False),
        ("executor-sample-tokens", "edited", True),
        ("executor-sample-tokens", "edited", True),
        ("collective-rpc-single-reply", "edited", True),
        ("kv-cache-resolve-layout", "not-needed", True),
        ("generator-kernel-block-size", "not-needed", True),
        ("generator-v1-runner", "not-needed", True),
        # The sandbox has no transformers (--no-deps): `since` decides, unguarded.
        ("eagle-attention-mask-fallback", "not-needed", False),
        ("pydantic-rebuild-torch-namespace", "not-needed", False),
    ]


@pytest.mark.slow
def test_apply_verifies_every_call_in_the_files_it_rewrote(sandbox: Sandbox, reference_vllm_source: Path) -> None:
    r = sandbox.run("--vllm-source", str(reference_vllm_source), "--vllm-version", realdata.REFERENCE_SERIES)
    assert r.returncode == 0, r.stderr
    # pydantic is not installed (--no-deps): the imports were not tested, so the verdict is partial.
    assert r.stdout.strip() == (
        f"patched speculators 0.3.0 for vLLM 0.16: {EDITS} edits in 2 files; vLLM 0.16 (static); verification partial: "
        "22 calls bind (static); not checked: 2 imports (pydantic missing in the target); "
        "rehearsal not run (no vLLM in the target)"
    )
    assert r.stderr.splitlines()[-2:] == [
        "import speculators.data_generation.custom_worker: not tested, pydantic is not installed in the target",
        "import speculators.data_generation.vllm_hidden_states_generator: not tested, pydantic is not installed "
        "in the target",
    ]
    v = sandbox.run("--vllm-source", str(reference_vllm_source), "verify", "--json")
    assert v.returncode == 0
    data = json.loads(v.stdout)
    assert (data["ok"], data["verdict"], data["not_checked"]) == (
        True, "partial", ["2 imports (pydantic missing in the target)"])
    # Every call into vLLM of both rewritten files, not only the four rewritten ones.
    assert [(b["path"].rsplit("/", 1)[1], b["line"], b["callee"].rsplit(".", 1)[1], b["status"])
            for b in data["bindings"]] == [
        ("custom_worker.py", 24, "get_pp_group", "ok"),  # two imports above it removed
        ("custom_worker.py", 39, "get_tp_group", "ok"),
        ("custom_worker.py", 53, "get_pp_group", "ok"),
        ("custom_worker.py", 54, "IntermediateTensors", "ok"),
        # The capture hooks' own calls; the Eagle3 gate's supports_eagle3 is gone.
        ("custom_worker.py", 100, "get_tp_group", "ok"),
        ("custom_worker.py", 106, "get_pp_group", "ok"),
        ("custom_worker.py", 106, "get_tp_group", "ok"),
        ("vllm_hidden_states_generator.py", 120, "MultiprocExecutor", "ok"),
        ("vllm_hidden_states_generator.py", 130, "unify_hybrid_kv_cache_specs", "ok"),
        ("vllm_hidden_states_generator.py", 131, "_get_kv_cache_groups_uniform_spec", "ok"),
        ("vllm_hidden_states_generator.py", 136, "get_kv_cache_config_from_groups", "ok"),
        ("vllm_hidden_states_generator.py", 143, "StructuredOutputManager", "ok"),
        ("vllm_hidden_states_generator.py", 147, "Scheduler", "ok"),
        ("vllm_hidden_states_generator.py", 166, "CacheConfig", "ok"),
        ("vllm_hidden_states_generator.py", 181, "VllmConfig", "ok"),
        ("vllm_hidden_states_generator.py", 182, "ModelConfig", "ok"),
        ("vllm_hidden_states_generator.py", 191, "ParallelConfig", "ok"),
        ("vllm_hidden_states_generator.py", 195, "SchedulerConfig", "ok"),
        ("vllm_hidden_states_generator.py", 201, "DeviceConfig", "ok"),
        ("vllm_hidden_states_generator.py", 202, "LoadConfig", "ok"),
        ("vllm_hidden_states_generator.py", 236, "Request", "ok"),
        ("vllm_hidden_states_generator.py", 239, "SamplingParams", "ok"),
    ]
    text = sandbox.run("--vllm-source", str(reference_vllm_source), "verify")
    assert text.returncode == 0
    assert text.stdout.splitlines()[-1] == (
        "verify speculators 0.3.0: partial: 22 calls bind (static); not checked: 2 imports "
        "(pydantic missing in the target)"
    )


def _fake_vllm(sandbox: Sandbox) -> None:
    """A vLLM distribution in the target that imports but has nothing the rehearsal needs."""
    (sandbox.site / "vllm").mkdir()
    (sandbox.site / "vllm" / "__init__.py").write_text(f"__version__ = '{realdata.REFERENCE_VLLM}'\n")
    dist = sandbox.site / f"vllm-{realdata.REFERENCE_VLLM}.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {realdata.REFERENCE_VLLM}\n")
    (dist / "RECORD").write_text("vllm/__init__.py,,\n")


@pytest.mark.slow
def test_apply_keeps_and_records_the_files_but_exits_1_when_the_rehearsal_cannot_run(
        sandbox: Sandbox, reference_vllm_source: Path) -> None:
    # vLLM is there, but speculators' generator cannot be imported (pydantic is not installed):
    # the files verified, so they stay and are recorded, yet a rehearsal that could not run is no pass.
    _fake_vllm(sandbox)
    r = sandbox.run("--vllm-source", str(reference_vllm_source), "--vllm-version", realdata.REFERENCE_SERIES)
    assert r.returncode == 1, r.stderr
    assert r.stdout.strip() == (
        f"patched speculators 0.3.0 for vLLM 0.16: {EDITS} edits in 2 files; vLLM 0.16 (static); verification partial: "
        "22 calls bind (static); not checked: 2 imports (pydantic missing in the target); "
        "rehearsal could not run: cannot rehearse: ModuleNotFoundError: No module named 'pydantic'"
    )
    assert b"kv_cache_specs=" not in (sandbox.site / GENERATOR).read_bytes()
    gitdir = next(sandbox.state.glob("speculators-*/git"))
    trailer = subprocess.run(["git", "--git-dir", str(gitdir), "log", "-1", "--format=%(trailers:key=Vsp-Verify,valueonly)"],
                             capture_output=True, text=True, check=True).stdout.strip()
    assert trailer == ("partial: 22 calls bind (static); not checked: 2 imports (pydantic missing in the target); "
                       "rehearsal could not run: cannot rehearse: ModuleNotFoundError: No module named 'pydantic'")
    # Where vLLM is installed, a patch that never ran is no health-check pass (issue 38).
    assert sandbox.run("status").stdout.startswith(
        "patched (not rehearsed: cannot rehearse: ModuleNotFoundError: No module named 'pydantic'): "
        "speculators 0.3.0 for vLLM 0.16")
    check = sandbox.run("--vllm-source", str(reference_vllm_source), "--vllm-version", realdata.REFERENCE_SERIES, "--check")
    assert (check.returncode, check.stdout) == (1, (
        f"speculators 0.3.0 is patched for vLLM 0.16 ({EDITS} edits in place) but not rehearsed (cannot rehearse: "
        "ModuleNotFoundError: No module named 'pydantic'): run patch-speculators rehearse, or pass "
        "--allow-unrehearsed to accept it\n")), check.stderr
    allowed = sandbox.run("--vllm-source", str(reference_vllm_source), "--vllm-version", realdata.REFERENCE_SERIES, "--check",
                          "--allow-unrehearsed", "--json")
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr
    assert {k: json.loads(allowed.stdout)[k] for k in ("ok", "rehearsed", "not_rehearsed")} == {
        "ok": True, "rehearsed": False,
        "not_rehearsed": "cannot rehearse: ModuleNotFoundError: No module named 'pydantic'"}
    # --no-rehearse: nothing was asked that could not run.
    sandbox.run("rollback")
    again = sandbox.run("--vllm-source", str(reference_vllm_source), "--vllm-version", realdata.REFERENCE_SERIES, "--no-rehearse")
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip().endswith("rehearsal not run (--no-rehearse)")


@pytest.mark.slow
def test_verify_all_reports_every_remaining_mismatch(sandbox: Sandbox, reference_vllm_source: Path) -> None:
    v = sandbox.run("--vllm-source", str(reference_vllm_source), "verify", "--all", "--json")
    assert v.returncode == 1
    data = json.loads(v.stdout)
    bad = [(b["path"], b["line"], b["callee"], b["reason"]) for b in data["bindings"] if b["status"] != "ok"]
    assert bad == [
        (GENERATOR, 136, "vllm.v1.core.kv_cache_utils.get_kv_cache_config_from_groups",
         "unexpected keyword argument 'kv_cache_specs'"),
        (GENERATOR, 148, "vllm.v1.core.sched.scheduler.Scheduler", "missing required argument 'block_size'"),
        (GENERATOR, 194, "vllm.config.SchedulerConfig", "missing required argument 'is_encoder_decoder'"),
    ]
    assert len(data["bindings"]) == 20


@pytest.mark.slow
def test_audit_names_the_fixing_rules(sandbox: Sandbox, reference_vllm_source: Path) -> None:
    a = sandbox.run("--vllm-source", str(reference_vllm_source), "audit", "--vllm-version", realdata.REFERENCE_SERIES)
    assert a.returncode == 0
    assert a.stdout.splitlines() == [
        "speculators 0.3.0 against no installed vLLM, rules for 0.16 (static signatures): 61 uses of vLLM "
        "(20 calls, 10 method calls, 21 imports, 10 attribute reads), and 13 the rules add",
        f"  {GENERATOR}:136: vllm.v1.core.kv_cache_utils.get_kv_cache_config_from_groups: mismatch "
        "(unexpected keyword argument 'kv_cache_specs') -> fixed by kv-cache-config-drop-specs",
        f"  {GENERATOR}:148: vllm.v1.core.sched.scheduler.Scheduler: mismatch "
        "(missing required argument 'block_size') -> fixed by scheduler-add-block-size",
        f"  {GENERATOR}:194: vllm.config.SchedulerConfig: mismatch "
        "(missing required argument 'is_encoder_decoder') -> fixed by scheduler-config-add-is-encoder-decoder",
        *SANDBOX_IMPORTS,
        f"74 uses: 71 ok, 3 fixed by the rules, 0 still mismatched, 0 unknown; {SANDBOX_IMPORTS_COUNT}",
    ]


@pytest.mark.parametrize(
    ("bound", "lines"),
    [
        pytest.param(BindResult("mismatch", missing=("is_encoder_decoder",)), [
            "- id: schedulerconfig-add-is-encoder-decoder",
            "  call: vllm.config.SchedulerConfig",
            '  since: "0.16"',
            '  add: {is_encoder_decoder: "TODO: an expression"}',
            "  why: \"vLLM 0.16: missing required argument 'is_encoder_decoder'\"",
        ], id="add"),
        pytest.param(BindResult("mismatch", unexpected=("kv_cache_specs",)), [
            "- id: schedulerconfig-drop-kv-cache-specs",
            "  call: vllm.config.SchedulerConfig",
            '  since: "0.16"',
            "  drop: [kv_cache_specs]",
            "  why: \"vLLM 0.16: unexpected keyword argument 'kv_cache_specs'\"",
        ], id="drop"),
        pytest.param(BindResult("mismatch", too_many=(7, 6)), [
            "- id: schedulerconfig-notice",
            "  call: vllm.config.SchedulerConfig",
            '  since: "0.16"',
            '  notice: "too many positional arguments (7 given, 6 accepted)"',
            '  why: "vLLM 0.16: too many positional arguments (7 given, 6 accepted)"',
        ], id="notice"),
    ],
)
def test_audit_suggests_a_rule_for_a_mismatch_no_rule_fixes(bound: BindResult, lines: list[str]) -> None:
    from vllm_shim_patch.analysis.audit import suggest
    from vllm_shim_patch.analysis.calls import CallRecord
    from vllm_shim_patch.report.binding import bind_reason

    call = CallRecord(GENERATOR, 194, "vllm.config.SchedulerConfig", 0, (), False, False, "SchedulerConfig()")
    assert suggest(call, bind_reason(bound), "0.16", bound=bound).splitlines() == lines


@pytest.mark.slow
def test_audit_with_the_opt_in_pack_leaves_nothing_mismatched(sandbox: Sandbox, reference_vllm_source: Path) -> None:
    a = sandbox.run("--vllm-source", str(reference_vllm_source), "audit", "--vllm-version", realdata.REFERENCE_SERIES)
    assert a.returncode == 0, a.stdout
    assert a.stdout.splitlines()[3] == (
        f"  {GENERATOR}:194: vllm.config.SchedulerConfig: mismatch "
        "(missing required argument 'is_encoder_decoder') -> fixed by scheduler-config-add-is-encoder-decoder"
    )
    assert a.stdout.splitlines()[-1] == (
        f"74 uses: 71 ok, 3 fixed by the rules, 0 still mismatched, 0 unknown; {SANDBOX_IMPORTS_COUNT}")


BAD_RULE = """\
schema: 1
rules:
  - id: scheduler-add-bogus
    call: vllm.v1.core.sched.scheduler.Scheduler
    since: "0.1"
    add: {bogus_flag: "True"}
    why: a rule that is wrong for every vLLM, to prove verification catches it
"""


@pytest.mark.slow
def test_failed_verification_restores_byte_for_byte(sandbox: Sandbox, reference_vllm_source: Path,
                                                    tmp_path: Path) -> None:
    rules = tmp_path / "bad.yaml"
    rules.write_text(BAD_RULE)
    before = sandbox.snapshot()
    r = sandbox.run("--vllm-source", str(reference_vllm_source), "--rules", str(rules), "--vllm-version", realdata.REFERENCE_SERIES,
                    "--no-guard")
    assert r.returncode == 1
    assert r.stdout.strip() == (
        "verification failed: 1 call does not bind: "
        f"{GENERATOR}:147: vllm.v1.core.sched.scheduler.Scheduler: mismatch (unexpected keyword argument "
        "'bogus_flag'); restored 2 files, nothing recorded"
    )
    assert sandbox.snapshot() == before
    assert json.loads(sandbox.run("status", "--json").stdout)["state"] == "original"


@pytest.mark.slow
def test_guard_skips_an_add_the_callee_does_not_take(sandbox: Sandbox, reference_vllm_source: Path,
                                                     tmp_path: Path) -> None:
    rules = tmp_path / "bad.yaml"
    rules.write_text(BAD_RULE)
    r = sandbox.run("--vllm-source", str(reference_vllm_source), "--rules", str(rules), "--vllm-version", realdata.REFERENCE_SERIES,
                    "--dry-run")
    assert r.returncode == 0
    assert f"{GENERATOR}:148: scheduler-add-bogus [not-needed, guarded] not needed for this vLLM: " \
           "Scheduler does not take bogus_flag" in r.stderr.splitlines()
    assert "bogus_flag" not in r.stdout

"""The audit on the real speculators 0.3.0 and 0.4.0 against the real vLLM sources: every finding
that is not ok, exactly (file, line, kind, name, status, reason), and the rules that fix it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import realdata
from conftest import GENERATOR, Sandbox

pytestmark = pytest.mark.slow

WORKER = "speculators/data_generation/custom_worker.py"



def findings(sandbox: Sandbox, version: str) -> tuple[list[tuple[object, ...]], dict[str, object]]:
    src = realdata.vllm_source(version)
    r = sandbox.run("--vllm-source", str(src), "audit", "--vllm-version", version, "--json")
    assert r.returncode in (0, 1), r.stderr
    data = json.loads(r.stdout)
    rows = [(u["path"], u["line"], u["kind"], u["callee"], (u["after"] or u)["status"], (u["after"] or u)["reason"],
             u["rules"]) for u in data["uses"] if u["status"] != "ok" or (u["after"] and u["after"]["status"] != "ok")]
    assert all(u["after"]["status"] == "ok" for u in data["uses"] if u["added"])  # what the rules write binds
    return rows, {**data["summary"], "exit": r.returncode}


def test_speculators_030_on_vllm_0110(sandbox: Sandbox) -> None:
    rows, summary = findings(sandbox, "0.11.0")
    # Written for vLLM 0.11: every use exists and binds, the @config pydantic configs included.
    assert rows == []
    # The data rules add three uses (the step's collective_rpc, the flush's execute_model, the
    # worker's read of the model runner's input_batch), the capture hooks six (get_tp_group,
    # get_pp_group and their rank_in_group, is_last_rank), all bound. The worker's read of
    # self.model_runner.model is one of the Worker's runner's attributes.
    assert summary == {"uses": 70, "added": 9, "ok": 70, "fixed": 0, "remaining": 0, "unknown": 0, "call": 20, "method": 10,
                       "import": 21, "attribute": 10, "exit": 0}


def test_speculators_030_on_vllm_0120(sandbox: Sandbox) -> None:
    rows, summary = findings(sandbox, "0.12.0")
    assert rows == [
        (GENERATOR, 136, "call", "vllm.v1.core.kv_cache_utils.get_kv_cache_config_from_groups", "ok", "",
         ["kv-cache-config-drop-specs"]),
        (GENERATOR, 148, "call", "vllm.v1.core.sched.scheduler.Scheduler", "ok", "", ["scheduler-add-block-size"]),
        # 0.12.0 made is_encoder_decoder a required InitVar of the @config pydantic SchedulerConfig.
        (GENERATOR, 194, "call", "vllm.config.SchedulerConfig", "ok", "", ["scheduler-config-add-is-encoder-decoder"]),
    ]
    assert (summary["fixed"], summary["remaining"], summary["unknown"], summary["exit"]) == (3, 0, 0, 0)


@pytest.mark.parametrize("version", realdata.VLLM_SOURCES)
def test_speculators_030_on_vllm_016_and_017(sandbox: Sandbox, version: str) -> None:
    rows, summary = findings(sandbox, version)
    expected = [
        (GENERATOR, 136, "call", "vllm.v1.core.kv_cache_utils.get_kv_cache_config_from_groups", "ok", "",
         ["kv-cache-config-drop-specs"]),
        (GENERATOR, 148, "call", "vllm.v1.core.sched.scheduler.Scheduler", "ok", "", ["scheduler-add-block-size"]),
        (GENERATOR, 194, "call", "vllm.config.SchedulerConfig", "ok", "", ["scheduler-config-add-is-encoder-decoder"]),
    ]
    if version == "0.17.0":
        expected.append((GENERATOR, 234, "call", "vllm.v1.request.Request", "ok", "", ["request-drop-eos-token-id"]))
    assert rows == expected
    assert (summary["uses"], summary["fixed"], summary["remaining"], summary["unknown"]) == (74, len(expected), 0, 0)
    # cache_config.block_size (twice: a.b, a.b.c), two sample_tokens, the data rules' collective_rpc,
    # execute_model and model_runner.input_batch, the capture hooks' six
    assert summary["added"] == 13


def test_speculators_040_on_vllm_0110_finds_what_is_gone(sandbox: Sandbox) -> None:
    sandbox.pip_reinstall(realdata.speculators_wheel(realdata.NEW_SPECULATORS))
    rows, summary = findings(sandbox, "0.11.0")
    assert rows == [
        (GENERATOR, 15, "import", "vllm.utils.hashing.get_hash_fn_by_name", "mismatch",
         "no module vllm.utils.hashing; get_hash_fn_by_name is in vllm.utils now", []),
        (GENERATOR, 143, "call", "vllm.v1.core.kv_cache_utils.get_kv_cache_config_from_groups", "mismatch",
         "missing required argument 'kv_cache_specs'", []),
        (GENERATOR, 154, "call", "vllm.v1.core.sched.scheduler.Scheduler", "mismatch",
         "unexpected keyword argument 'block_size'", []),
        (GENERATOR, 167, "call", "vllm.utils.hashing.get_hash_fn_by_name", "unknown",
         "not bound: vllm.utils has no name 'hashing' (see the import)", []),
        (GENERATOR, 315, "method", "vllm.v1.executor.multiproc_executor.MultiprocExecutor.sample_tokens", "mismatch",
         "instance of vllm.v1.executor.multiproc_executor.MultiprocExecutor has no attribute 'sample_tokens'", []),
    ]
    # The capture hooks add six uses, all bound. The worker's reads of the Worker's model runner
    # (model, input_batch) are V1's and exist.
    assert summary == {"uses": 78, "added": 6, "ok": 73, "fixed": 0, "remaining": 4, "unknown": 1, "call": 22, "method": 12,
                       "import": 23, "attribute": 15, "exit": 1}


@pytest.mark.parametrize("version", ["0.12.0", realdata.REFERENCE_VLLM])
def test_speculators_040_on_vllm_012_and_016(sandbox: Sandbox, version: str) -> None:
    sandbox.pip_reinstall(realdata.speculators_wheel(realdata.NEW_SPECULATORS))
    rows, summary = findings(sandbox, version)
    assert rows == []
    assert (summary["uses"], summary["remaining"], summary["exit"]) == (78, 0, 0)


def test_speculators_040_on_vllm_0170(sandbox: Sandbox) -> None:
    sandbox.pip_reinstall(realdata.speculators_wheel(realdata.NEW_SPECULATORS))
    rows, summary = findings(sandbox, "0.17.0")
    assert rows == [(GENERATOR, 264, "call", "vllm.v1.request.Request", "ok", "", ["request-drop-eos-token-id"])]
    assert (summary["uses"], summary["fixed"], summary["remaining"], summary["unknown"]) == (78, 1, 0, 0)


def test_emit_rules_drafts_what_a_rule_can_say_and_rules_check_refuses_it_until_filled(
        sandbox: Sandbox, tmp_path: Path) -> None:
    sandbox.pip_reinstall(realdata.speculators_wheel(realdata.NEW_SPECULATORS))
    draft = tmp_path / "draft.yaml"
    src = realdata.vllm_source("0.11.0")
    r = sandbox.run("--vllm-source", str(src), "audit", "--emit-rules", str(draft))
    assert r.returncode == 1, r.stderr
    assert r.stdout.splitlines()[-1] == (
        f"draft rules for 3 mismatches written to {draft}; fill 1 placeholder before use")
    text = draft.read_text()
    rules = [line.strip() for line in text.splitlines() if line.startswith(("  - id:", "    move:", "    add:",
                                                                              "    drop:", "    call:"))]
    assert rules == [
        "- id: get-hash-fn-by-name-move", "call: vllm.utils.hashing.get_hash_fn_by_name",
        "move: vllm.utils.get_hash_fn_by_name",
        "- id: get-kv-cache-config-from-groups-add-kv-cache-specs",
        "call: vllm.v1.core.kv_cache_utils.get_kv_cache_config_from_groups",
        'add: {kv_cache_specs: "TODO: an expression"}',
        "- id: scheduler-drop-block-size", "call: vllm.v1.core.sched.scheduler.Scheduler", "drop: [block_size]",
    ]
    assert text.splitlines()[-1] == (
        f"#   {GENERATOR}:315: method vllm.v1.executor.multiproc_executor.MultiprocExecutor.sample_tokens: "
        "instance of vllm.v1.executor.multiproc_executor.MultiprocExecutor has no attribute 'sample_tokens'")
    assert "          from vllm.v1.core.sched.scheduler import Scheduler\n          Scheduler(\n" \
           "              vllm_config=self.vllm_config,\n" in text
    check = sandbox.run("rules", "check", str(draft))
    line = next(i for i, s in enumerate(text.splitlines(), 1) if s.startswith("    add:"))
    assert (check.returncode, check.stderr) == (2, (
        f"patch-speculators: error: {draft}:{line}: rule 'get-kv-cache-config-from-groups-add-kv-cache-specs': "
        "'add' 'kv_cache_specs': 'TODO: an expression' is not a single Python expression\n"))
    filled = tmp_path / "filled.yaml"
    filled.write_text(text.replace("TODO: an expression", "kv_cache_spec"))
    ok = sandbox.run("rules", "check", str(filled))
    assert (ok.returncode, ok.stdout) == (0, "3 rules OK in 1 file\n")
    tested = sandbox.run("rules", "test", str(filled))
    assert (tested.returncode, tested.stdout) == (0, "6 examples ok, 0 failing\n")
    # With the filled draft the calls bind and the moved name's import points at its new module
    # (the move edits it where it stands); what is left is the method no rule can name.
    again = sandbox.run("--vllm-source", str(src), "--rules", str(filled), "audit", "--json")
    data = json.loads(again.stdout)
    fixed = [(u["line"], u["rules"], u["after"]["callee"]) for u in data["uses"] if u["fixed"]]
    assert fixed == [(15, ["get-hash-fn-by-name-move"], "vllm.utils.get_hash_fn_by_name"),
                     (143, ["get-kv-cache-config-from-groups-add-kv-cache-specs"],
                      "vllm.v1.core.kv_cache_utils.get_kv_cache_config_from_groups"),
                     (154, ["scheduler-drop-block-size"], "vllm.v1.core.sched.scheduler.Scheduler")]
    # What the bundled capture hooks add, bound; nothing the draft's rules add or remove.
    assert [(u["line"], u["callee"]) for u in data["uses"] if u["added"] or u["removed"]] == [
        (109, "vllm.distributed.get_tp_group"), (109, "vllm.distributed.get_tp_group.rank_in_group"),
        (115, "vllm.distributed.get_pp_group"), (115, "vllm.distributed.get_tp_group"),
        (115, "vllm.distributed.get_pp_group.is_last_rank"), (115, "vllm.distributed.get_tp_group.rank_in_group")]
    left = [(u["line"], u["callee"]) for u in data["uses"] if u["remaining"]]
    assert left == [(315, "vllm.v1.executor.multiproc_executor.MultiprocExecutor.sample_tokens")]
    text = sandbox.run("--vllm-source", str(src), "--rules", str(filled), "audit").stdout.splitlines()
    assert f"  {GENERATOR}:15: import vllm.utils.hashing.get_hash_fn_by_name: mismatch (no module " \
           "vllm.utils.hashing; get_hash_fn_by_name is in vllm.utils now) -> fixed by get-hash-fn-by-name-move" \
           in text


def test_emit_rules_writes_nothing_when_no_rule_can_say_it(sandbox: Sandbox, tmp_path: Path) -> None:
    draft = tmp_path / "draft.yaml"
    r = sandbox.run("--vllm-source", str(realdata.vllm_source(realdata.REFERENCE_VLLM)), "audit", "--emit-rules", str(draft))
    assert r.returncode == 0
    assert r.stdout.splitlines()[-1] == f"no mismatch a rule can express: {draft} not written"
    assert not draft.exists()


@pytest.mark.parametrize("version", ["0.11.1", "0.11.2"])
def test_speculators_030_and_040_on_vllm_0111_and_0112(sandbox: Sandbox, version: str) -> None:
    rows, summary = findings(sandbox, version)
    assert rows == [
        (GENERATOR, 148, "call", "vllm.v1.core.sched.scheduler.Scheduler", "ok", "", ["scheduler-add-block-size"]),
    ]
    assert (summary["uses"], summary["fixed"], summary["remaining"], summary["exit"]) == (74, 1, 0, 0)
    sandbox.pip_reinstall(realdata.speculators_wheel(realdata.NEW_SPECULATORS))
    rows, summary = findings(sandbox, version)
    assert rows == [
        # speculators 0.4.0 passes no kv_cache_specs: right from vLLM 0.12.0 on, not before.
        (GENERATOR, 143, "call", "vllm.v1.core.kv_cache_utils.get_kv_cache_config_from_groups", "mismatch",
         "missing required argument 'kv_cache_specs'", []),
    ]
    assert (summary["uses"], summary["remaining"], summary["exit"]) == (78, 1, 1)


def test_emit_rules_to_a_folder_that_does_not_exist_is_one_line(sandbox: Sandbox, tmp_path: Path) -> None:
    sandbox.pip_reinstall(realdata.speculators_wheel(realdata.NEW_SPECULATORS))
    dest = tmp_path / "missing" / "draft.yaml"
    r = sandbox.run("--vllm-source", str(realdata.vllm_source("0.11.0")), "audit", "--emit-rules", str(dest))
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == f"patch-speculators: error: --emit-rules {dest}: cannot write: No such file or directory\n"
    assert not dest.parent.exists()


def test_after_apply_the_audit_is_clean_and_after_rollback_it_is_not(sandbox: Sandbox) -> None:
    """The audit reads the files as installed: after apply nothing is pending (with or without
    the rules), after rollback the original mismatches are back, byte for byte the same report."""
    src = str(realdata.vllm_source(realdata.REFERENCE_VLLM))
    before = sandbox.run("--vllm-source", src, "audit", "--no-rules", "--json")
    assert before.returncode == 1, before.stderr
    mismatched = [(u["path"], u["line"], u["callee"]) for u in json.loads(before.stdout)["uses"]
                  if u["status"] == "mismatch"]
    assert mismatched == [(GENERATOR, 136, "vllm.v1.core.kv_cache_utils.get_kv_cache_config_from_groups"),
                          (GENERATOR, 148, "vllm.v1.core.sched.scheduler.Scheduler"),
                          (GENERATOR, 194, "vllm.config.SchedulerConfig")]
    applied = sandbox.run("--vllm-source", src)
    assert applied.returncode == 0, applied.stderr
    with_rules = sandbox.run("--vllm-source", src, "audit", "--json")
    assert with_rules.returncode == 0, with_rules.stderr
    data = json.loads(with_rules.stdout)
    assert data["rules_installed_in"] == [WORKER, GENERATOR]
    assert {k: data["summary"][k] for k in ("uses", "added", "ok", "fixed", "remaining", "unknown")} == {
        "uses": 72, "added": 0, "ok": 72, "fixed": 0, "remaining": 0, "unknown": 0}
    # A line of one's own on top of the patched generator: its uses as installed are paired with
    # the plan's through the installed bytes (each one line above after the rules), none taken
    # out or added.
    path = sandbox.site / GENERATOR
    patched = path.read_bytes()
    path.write_bytes(b"# a local note\n" + patched)
    edited = json.loads(sandbox.run("--vllm-source", src, "audit", "--json").stdout)
    path.write_bytes(patched)
    assert edited["rules_installed_in"] == [WORKER]
    assert {k: edited["summary"][k] for k in ("uses", "added", "ok")} == {"uses": 72, "added": 0, "ok": 72}
    moved = [(u["line"], (u["after"] or {}).get("line")) for u in edited["uses"] if u["path"] == GENERATOR]
    assert len(moved) == 52 and moved == [(line, line - 1) for line, _ in moved]
    no_rules = sandbox.run("--vllm-source", src, "audit", "--no-rules")
    assert no_rules.returncode == 0, no_rules.stdout
    # The sandbox holds speculators alone: none of the packages it imports is installed to check.
    assert no_rules.stdout.splitlines()[-1] == (
        "72 uses: 72 ok, 0 mismatched, 0 unknown; 138 imports of other packages: 0 ok, 0 mismatched, 138 unknown")
    assert sandbox.run("rollback").returncode == 0
    again = sandbox.run("--vllm-source", src, "audit", "--no-rules", "--json")
    assert (again.returncode, again.stdout) == (1, before.stdout)


KV_UTILS = "vllm.v1.core.kv_cache_utils"


def _gone(name: str, hint: str = "no public module of this vLLM defines") -> str:
    where = f"{name} is in {hint} now" if hint.startswith("vllm.") else f"{hint} {name}"
    return f"{KV_UTILS} has no name '{name}'; {where}"


def _see_import(name: str) -> str:
    return f"not bound: {KV_UTILS} has no name '{name}' (see the import)"


def test_speculators_030_on_vllm_0102_names_each_import_and_no_follow_on_mismatch(sandbox: Sandbox) -> None:
    """Each name of a multi-line import on its own line; what reads a missing import's result
    (`kv_cache_config.num_blocks`) is unknown, like the call itself, never a second mismatch."""
    rows, summary = findings(sandbox, "0.10.2")
    assert rows == [
        (GENERATOR, 16, "import", f"{KV_UTILS}._get_kv_cache_groups_uniform_spec", "mismatch",
         _gone("_get_kv_cache_groups_uniform_spec"), []),
        (GENERATOR, 17, "import", f"{KV_UTILS}.get_kv_cache_config_from_groups", "mismatch",
         _gone("get_kv_cache_config_from_groups"), []),
        (GENERATOR, 131, "call", f"{KV_UTILS}._get_kv_cache_groups_uniform_spec", "unknown",
         _see_import("_get_kv_cache_groups_uniform_spec"), []),
        (GENERATOR, 136, "call", f"{KV_UTILS}.get_kv_cache_config_from_groups", "unknown",
         _see_import("get_kv_cache_config_from_groups"), []),
        (GENERATOR, 143, "attribute", f"{KV_UTILS}.get_kv_cache_config_from_groups.num_blocks", "unknown",
         _see_import("get_kv_cache_config_from_groups"), []),
    ]
    assert summary == {"uses": 70, "added": 9, "ok": 65, "fixed": 0, "remaining": 2, "unknown": 3,
                       "call": 20, "method": 10, "import": 21, "attribute": 10, "exit": 1}


def test_speculators_030_on_vllm_0330_the_bundled_moves_fix_the_imports(sandbox: Sandbox) -> None:
    """vLLM 0.33.0 moved three names speculators 0.3.0 imports; the bundled moves point the import
    at the new module and the calls follow it: each call as installed (unknown, like the import it
    reads) is paired with itself after the rules, and binds there."""
    rows, summary = findings(sandbox, "0.33.0")
    moves = {"_get_kv_cache_groups_uniform_spec": "get-kv-cache-groups-uniform-spec-move",
             "get_kv_cache_config_from_groups": "get-kv-cache-config-from-groups-move",
             "unify_hybrid_kv_cache_specs": "unify-hybrid-kv-cache-specs-move"}
    assert rows[:7] == [
        *((GENERATOR, line, "import", f"{KV_UTILS}.{name}", "ok", "", [moves[name]])
          for line, name in ((16, "_get_kv_cache_groups_uniform_spec"), (17, "get_kv_cache_config_from_groups"),
                             (18, "unify_hybrid_kv_cache_specs"))),
        (GENERATOR, 130, "call", f"{KV_UTILS}.unify_hybrid_kv_cache_specs", "ok", "",
         [moves["unify_hybrid_kv_cache_specs"]]),
        (GENERATOR, 131, "call", f"{KV_UTILS}._get_kv_cache_groups_uniform_spec", "ok", "",
         [moves["_get_kv_cache_groups_uniform_spec"]]),
        (GENERATOR, 136, "call", f"{KV_UTILS}.get_kv_cache_config_from_groups", "ok", "",
         ["kv-cache-config-drop-specs", moves["get_kv_cache_config_from_groups"], "kv-cache-resolve-layout"]),
        # Its result's attribute, after generator-kernel-block-size's inserted uses: paired with
        # itself too (its line is one the rules keep).
        (GENERATOR, 143, "attribute", f"{KV_UTILS}.get_kv_cache_config_from_groups.num_blocks", "ok", "", []),
    ]
    assert [(r[1], r[4], r[6]) for r in rows[7:]] == [
        (148, "ok", ["scheduler-add-block-size"]), (194, "ok", ["scheduler-config-add-is-encoder-decoder"]),
        (234, "ok", ["request-drop-eos-token-id"])]
    assert {k: summary[k] for k in ("fixed", "remaining", "unknown", "exit")} == {
        "fixed": 6, "remaining": 0, "unknown": 0, "exit": 0}


def test_speculators_040_on_vllm_0100_names_every_problem_of_a_call(sandbox: Sandbox, tmp_path: Path) -> None:
    """One reading names all a call needs: the keyword to drop and the arguments to add, and the
    suggested rule says both."""
    sandbox.pip_reinstall(realdata.speculators_wheel(realdata.NEW_SPECULATORS))
    rows, _ = findings(sandbox, "0.10.0")
    request = next(r for r in rows if r[3] == "vllm.v1.request.Request")
    assert request == (GENERATOR, 264, "call", "vllm.v1.request.Request", "mismatch",
                       "unexpected keyword argument 'block_hasher'; missing required arguments "
                       "'multi_modal_inputs', 'multi_modal_hashes', 'multi_modal_placeholders'", [])
    text = sandbox.run("--vllm-source", str(realdata.vllm_source("0.10.0")), "audit").stdout
    assert ("      - id: request-drop-block-hasher-add-multi-modal-inputs-multi-modal-hashes-multi-modal-placeholders\n"
            "        call: vllm.v1.request.Request\n"
            '        since: "0.10.0"\n'
            "        drop: [block_hasher]\n"
            '        add: {multi_modal_inputs: "TODO: an expression", multi_modal_hashes: "TODO: an expression", '
            'multi_modal_placeholders: "TODO: an expression"}\n') in text


def test_a_file_record_lists_but_is_gone_is_named_not_skipped_in_silence(sandbox: Sandbox) -> None:
    (sandbox.site / "speculators/data_generation/configs.py").unlink()
    src = str(realdata.vllm_source(realdata.REFERENCE_VLLM))
    r = sandbox.run("--vllm-source", src, "audit", "--no-rules")
    assert r.stdout.splitlines()[0] == (
        "note: speculators/data_generation/configs.py is missing (RECORD lists it): not audited")
    data = json.loads(sandbox.run("--vllm-source", src, "audit", "--json").stdout)
    assert data["missing"] == ["speculators/data_generation/configs.py"]


def test_drafted_moves_for_vllm_0330_are_the_bundled_ones(sandbox: Sandbox, tmp_path: Path) -> None:
    """vLLM 0.33.0 moved three names speculators 0.3.0 imports: without the rules the audit drafts
    the moves the bundled rules carry (same ids, calls and targets), and with the bundled rules
    nothing is left."""
    import yaml

    from vllm_shim_patch.rules.loader import load_pack

    src = str(realdata.vllm_source("0.33.0"))
    draft = tmp_path / "moves.yaml"
    r = sandbox.run("--vllm-source", src, "audit", "--no-rules", "--emit-rules", str(draft))
    assert r.stdout.splitlines()[-1] == (f"draft rules for 6 mismatches written to {draft}; "
                                         "fill 2 placeholders before use")
    # The draft's add rules carry placeholders (the loader refuses them): its moves read as YAML.
    drafted = {(d["id"], (d["call"],), d["move"]) for d in yaml.safe_load(draft.read_text())["rules"] if "move" in d}
    bundled = {(b.id, b.calls, b.op("move")) for b in load_pack().rules if "move" in b.operations}
    assert drafted == bundled and len(bundled) == 3
    clean = sandbox.run("--vllm-source", src, "audit", "--json")
    data = json.loads(clean.stdout)
    assert (clean.returncode, data["summary"]["remaining"], data["summary"]["unknown"]) == (0, 0, 0)


RUNNER_INPUT_BATCH = "vllm.v1.worker.gpu_worker.Worker.model_runner.input_batch"
NO_INPUT_BATCH = "instance of vllm.v1.worker.gpu.model_runner.GPUModelRunner has no attribute 'input_batch'"


def _runner_rows(sandbox: Sandbox, *args: str) -> tuple[list[str], str]:
    """The text lines on the worker's model runner, and the summary line, against vLLM 0.34.0."""
    src = str(realdata.vllm_source("0.34.0"))
    r = sandbox.run("--vllm-source", src, *args, "audit", "--vllm-version", "0.34")
    assert r.returncode in (0, 1), r.stderr
    lines = r.stdout.splitlines()
    return [x for x in lines if "model_runner" in x], lines[-1].split(";")[0]


def test_speculators_040_on_vllm_0340_reads_the_v1_runners_input_batch(sandbox: Sandbox) -> None:
    """vLLM 0.34 removed Model Runner V1: the worker extension's self.model_runner is the Worker's
    V2 runner, which has no input_batch, told before any model is loaded; worker-v2-forward-batch
    takes the read out, and without it no rule fixes it."""
    sandbox.pip_reinstall(realdata.speculators_wheel(realdata.NEW_SPECULATORS))
    rows, summary = _runner_rows(sandbox)
    assert rows == [f"  {WORKER}:106: attribute {RUNNER_INPUT_BATCH}: mismatch ({NO_INPUT_BATCH}) "
                    "-> taken out by worker-v2-forward-batch"]
    assert summary == "94 uses: 89 ok, 5 fixed by the rules, 0 still mismatched, 0 unknown"
    rows, summary = _runner_rows(sandbox, "--skip", "worker-v2-forward-batch")
    assert rows == [f"  {WORKER}:106: attribute {RUNNER_INPUT_BATCH}: mismatch ({NO_INPUT_BATCH}) -> no rule fixes this"]
    assert summary == "94 uses: 89 ok, 4 fixed by the rules, 1 still mismatched, 0 unknown"


def test_speculators_030_on_vllm_0340_the_request_tracking_alone_would_write_a_v1_read(sandbox: Sandbox) -> None:
    """speculators 0.3.0 reads no input_batch; worker-request-tracking writes one, which the V2
    rule takes out again: without it the audit names the rule's own line."""
    rows, summary = _runner_rows(sandbox)
    assert rows == []
    assert summary == "87 uses: 81 ok, 6 fixed by the rules, 0 still mismatched, 0 unknown"
    rows, summary = _runner_rows(sandbox, "--skip", "worker-v2-forward-batch")
    assert rows == [f"  {WORKER}:154: attribute {RUNNER_INPUT_BATCH}: mismatch ({NO_INPUT_BATCH}) (added by the "
                    "rules; line of the patched file) -> the rules write this; fix the rule"]
    assert summary == "88 uses: 81 ok, 6 fixed by the rules, 1 still mismatched, 0 unknown"

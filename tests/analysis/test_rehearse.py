"""The rehearsal's plumbing: the target session's one answer, when it refuses to run, and which
rule a failure names. The run itself is tested on the real vLLM in tests/e2e/test_rehearse_realvllm.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from vllm_shim_patch._remote.rehearse import families
from vllm_shim_patch.analysis.handoff import Answer
from wire import on_the_wire
from vllm_shim_patch.analysis.rehearse import SUPPORTED, interpret, refusal, request
from vllm_shim_patch.errors import TargetError
from packaging.version import Version

from vllm_shim_patch.rewrite.results import FileResult, Site
from vllm_shim_patch.rewrite.plan import Plan
from vllm_shim_patch.kinds import Action, FileStatus
from vllm_shim_patch.target import REMOTE, Target

TARGET = Target(python="/env/bin/python", python_version="3.11.7", package="speculators", version="0.3.0",
                location=Path("/env/site"), record=(), editable=None, vllm_version="0.16.0",
                vllm_location=Path("/env/site/vllm"))


def session(request: dict, tmp: Path | None = None) -> tuple[subprocess.CompletedProcess[str], dict]:
    env = {**os.environ, "TMPDIR": str(tmp)} if tmp else None
    proc = subprocess.run([sys.executable, str(REMOTE / "session.py")], input=json.dumps(request),
                          capture_output=True, text=True, cwd=tempfile.gettempdir(), env=env)
    return proc, json.loads(proc.stdout)


def test_one_process_answers_imports_and_signatures_in_one_json_object() -> None:
    proc, answer = session({"imports": {"modules": ["json", "no_such_module_vsp"], "own": "speculators"},
                            "signatures": ["json.dumps"], "rehearse": None})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("\n") == 1  # exactly one JSON line: nothing imported printed into it
    assert [(r["module"], r["status"]) for r in answer["imports"]] == [
        ("json", "ok"), ("no_such_module_vsp", "missing-dependency")]
    params = answer["signatures"]["results"]["json.dumps"]["params"]
    assert [p["name"] for p in params][:2] == ["obj", "skipkeys"]
    assert answer["rehearse"] is None


def test_rehearsal_without_speculators_cannot_run_and_cleans_up(tmp_path: Path) -> None:
    proc, answer = session({"imports": None, "signatures": None, "rehearse": request(timeout=60).to_json()}, tmp_path)
    assert proc.returncode == 0, proc.stderr
    r = answer["rehearse"]
    assert (r["ok"], r["outcome"], r["stage"]) == (False, "cannot_rehearse", "import")
    assert r["failure"]["exception"] == "cannot rehearse: ModuleNotFoundError: No module named 'speculators'"
    assert list(tmp_path.iterdir()) == []  # its temp folder (model, vLLM cache) is gone


@pytest.mark.parametrize(("changes", "why"), [
    ({"package": "other"}, ("other is not speculators",
                            "the rehearsal drives speculators' generator; other is not speculators")),
    ({"version": "0.2.0"}, ("speculators 0.2.0 is not supported",
                            f"the rehearsal supports speculators {', '.join(SUPPORTED)}; speculators 0.2.0 is installed "
                             "(verify still binds its calls)")),
    ({"vllm_location": None}, ("no vLLM in the target",
                               "vLLM is not installed in /env/bin/python: give --python the interpreter of the "
                               "environment that has vLLM")),
])
def test_refusals_say_why(changes: dict, why: tuple[str, str]) -> None:
    from dataclasses import replace

    from vllm_shim_patch.analysis.rehearse import check_can_run

    target = replace(TARGET, **changes)
    assert refusal(target) == why
    with pytest.raises(TargetError, match="^cannot rehearse: "):
        check_can_run(target)
    assert refusal(TARGET) is None


GEN = "speculators/data_generation/vllm_hidden_states_generator.py"
SCOPE = "speculators.data_generation.vllm_hidden_states_generator:VllmHiddenStatesGenerator.generate"


def _plan(*sites: Site) -> Plan:
    result = FileResult(GEN, FileStatus.CHANGED, sites=sites)
    return Plan(TARGET, Version("0.16"), None, None, (), (result,))


def reply(fields: dict) -> Answer:
    return on_the_wire(fields)


def _failed(line: int, function: str) -> dict:
    return {"outcome": "failed", "failure": {"exception": "TypeError: ...", "speculators_frame": {
        "file": GEN, "line": line, "code": "...", "function": function}}}


SITES = (
    Site("scheduler-add-block-size", GEN, 147, 151, "vllm.v1.core.sched.scheduler.Scheduler", Action.EDITED, "", True),
    Site("executor-sample-tokens", GEN, 261, 261, SCOPE, Action.EDITED, "", True),
    Site("collective-rpc-single-reply", GEN, 271, 271, SCOPE, Action.EDITED, "", True),
    Site("request-drop-eos-token-id", GEN, 234, 243, "vllm.v1.request.Request", Action.NOT_NEEDED, "", True),
)


@pytest.mark.parametrize(("line", "function", "fixes"), [
    (149, "__init__", ["scheduler-add-block-size"]),  # inside the call a rule edits
    (263, "generate", ["executor-sample-tokens"]),  # no site spans it: a scoped edit just above it
    (275, "generate", ["collective-rpc-single-reply"]),
    (290, "generate", []),  # too far below any edit of the function: no guess
    (255, "generate", []),  # above the edits: they cannot be its cause
    (240, "generate", []),  # a not-needed site is no fix
    (100, "_create_vllm_config", []),  # nothing pending matches: the report lists the pending rules
])
def test_the_failing_site_names_the_rule(line: int, function: str, fixes: list[str]) -> None:
    r = interpret(reply(_failed(line, function)), _plan(*SITES))
    assert [s.rule_id for s in r.fixes] == fixes
    assert r.pending == ("scheduler-add-block-size", "executor-sample-tokens", "collective-rpc-single-reply")


def test_running_out_of_time_names_no_rule_even_on_a_line_a_rule_edits() -> None:
    from vllm_shim_patch._remote.rehearse import answer

    run = answer.Run()
    run.stage = "init"
    timed_out = answer.timed_out(run, 900)
    assert timed_out.failure is not None
    timed_out.failure["speculators_frame"] = _failed(149, "__init__")["failure"]["speculators_frame"]  # in an edit
    r = interpret(reply(timed_out.to_json()), _plan(*SITES))
    assert (r.outcome, r.passed, r.failed, r.fixes, r.pending, r.opt_ins) == ("timeout", False, False, (), (), ())


def test_a_rule_declined_in_review_is_named_as_declined() -> None:
    r = interpret(reply(_failed(149, "__init__")), _plan(*SITES), frozenset({"scheduler-add-block-size"}))
    assert [(s.rule_id, s.action) for s in r.fixes] == [("scheduler-add-block-size", Action.DECLINED)]


WRONG = {"outcome": "failed", "failure": {"exception": "WrongOutput: 3 of 40 sequences wrong"},
         "wrong": [{"call": 1, "sequences": 8, "problems": [], "stale_requests": 0, "worker_holds": []}],
         "data_frames": [{"file": GEN, "line": 250, "end_line": 280, "function": "generate"}]}


def test_wrong_data_names_the_pending_rules_inside_the_code_that_produced_it() -> None:
    r = interpret(reply(WRONG), _plan(*SITES))
    # Each rule once, in plan order; an edit outside generate()'s lines is no fix.
    assert [s.rule_id for s in r.fixes] == ["executor-sample-tokens", "collective-rpc-single-reply"]


def test_a_rule_left_out_by_skip_is_named_as_skipped() -> None:
    r = interpret(reply(WRONG), _plan(*SITES), skipped=frozenset({"collective-rpc-single-reply"}))
    assert [(s.rule_id, s.action) for s in r.fixes] == [("executor-sample-tokens", Action.EDITED),
                                                        ("collective-rpc-single-reply", Action.SKIPPED)]
    r = interpret(reply(_failed(149, "__init__")), _plan(*SITES), skipped=frozenset({"scheduler-add-block-size"}))
    assert [(s.rule_id, s.action) for s in r.fixes] == [("scheduler-add-block-size", Action.SKIPPED)]


def test_the_parity_workload_is_speculators_own_and_chunks() -> None:
    from vllm_shim_patch.analysis.workloads import PARITY, QUICK

    req = request().to_json()
    assert (req["workload"], req["max_model_len"], len(req["calls"])) == ("parity", 2048, 6)
    eight = [c for c in PARITY.calls if len(c.lengths) == 8]
    assert len(eight) == 3 and all(300 <= n <= 2047 for c in eight for n in c.lengths)
    # speculators 0.3.0's step budget is max(8192, max_model_len): each of these calls is more.
    assert all(sum(c.lengths) > 8192 for c in eight)
    assert sorted({c.reorder for c in PARITY.calls if c.reorder}) == [1, 128]
    assert max(len(c.lengths) for c in PARITY.calls) == 12
    assert request(quick=True).to_json()["calls"] == [{"lengths": [37, 21], "seed": 0, "reorder": None},
                                                     {"lengths": [53, 18], "seed": 1, "reorder": None}]
    assert QUICK.max_model_len == 512


def test_a_pass_needs_no_plan() -> None:
    r = interpret(reply({"outcome": "passed", "failure": None}), None)
    assert (r.passed, r.failed, r.fixes, r.pending) == (True, False, (), ())


@pytest.mark.slow
def test_rehearse_without_vllm_in_the_target_exits_2(sandbox) -> None:  # type: ignore[no-untyped-def]
    r = sandbox.run("rehearse")
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == (f"patch-speculators: error: cannot rehearse: vLLM is not installed in {sandbox.python}: "
                        "give --python the interpreter of the environment that has vLLM\n")
    j = sandbox.run("rehearse", "--json")
    assert j.returncode == 2
    assert json.loads(j.stdout)["ok"] is False


def test_the_tool_reads_the_rehearsals_one_family_table() -> None:
    from vllm_shim_patch.analysis import rehearse as tool_side

    table = tool_side.families()
    assert Path(table.__file__) == Path(families.__file__)  # the same file, no copy of it
    assert table is tool_side.families()  # loaded once
    assert {name: f.ARCHITECTURES for name, f in table.FAMILIES.items()} == {
        name: f.ARCHITECTURES for name, f in families.FAMILIES.items()}
    assert tool_side.presets() == families.presets()
    assert tool_side.supported_architectures() == families.supported()


def test_a_model_folder_or_its_config_is_sent_as_an_absolute_path(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from vllm_shim_patch.analysis.rehearse import model_request

    folder = tmp_path / "Kimi-K2"
    folder.mkdir()
    # vocab_size: a config without one is refused (tests/analysis/test_modelconfig.py).
    (folder / "config.json").write_text(json.dumps({"architectures": ["DeepseekV3ForCausalLM"], "vocab_size": 163840}))
    monkeypatch.chdir(tmp_path)
    assert model_request("Kimi-K2", None) == {"model": str(folder)}
    assert model_request("Kimi-K2/config.json", None) == {"model": str(folder / "config.json")}
    assert model_request(None, "mistral-large-3") == {"arch": "mistral-large-3"}
    assert model_request(None, None) == {}
    assert request(model={"arch": "deepseek"}).arch == "deepseek"


@pytest.mark.parametrize(("config", "arch", "message"), [
    (None, None, "--model {m}: {m}/config.json does not exist (give the model folder or its config.json)"),
    ('{"architectures": ["LlamaForCausalLM"],\n  oops}', None, "--model {m}: {m}/config.json:2: not JSON "
                                                               "(Expecting property name enclosed in double quotes)"),
    ('{"model_type": "llama"}', None, "--model {m}: {m}/config.json names no architectures"),
    # The architectures of the one family table (a new family's are listed without a change here).
    ('{"architectures": ["MambaForCausalLM"]}', None,
     "--model {m}: the rehearsal has no stand-ins for MambaForCausalLM (supported: "
     + ", ".join(sorted(a for f in families.FAMILIES.values() for a in f.ARCHITECTURES)) + ")"),
    ('{"architectures": ["LlamaForCausalLM"]}', "llama", "--model and --arch: give one (--arch builds a preset "
                                                          "where no checkpoint is at hand)"),
])
def test_a_model_the_rehearsal_cannot_build_is_a_usage_error(tmp_path: Path, config: str | None, arch: str | None,
                                                             message: str) -> None:
    from vllm_shim_patch.analysis.rehearse import model_request
    from vllm_shim_patch.errors import UsageError

    folder = tmp_path / "m"
    folder.mkdir()
    if config is not None:
        (folder / "config.json").write_text(config)
    with pytest.raises(UsageError) as e:
        model_request(str(folder), arch)
    assert str(e.value) == message.format(m=folder)


def test_an_unknown_preset_names_the_known_ones() -> None:
    from vllm_shim_patch.analysis.rehearse import model_request
    from vllm_shim_patch.errors import UsageError

    known = sorted(name for f in families.FAMILIES.values() for name in (f.NAME, *f.PRESETS))
    with pytest.raises(UsageError) as e:
        model_request(None, "gemma")
    assert str(e.value) == f"--arch gemma: no such preset (known: {', '.join(known)})"
    assert known[:4] == ["deepseek", "gpt-oss", "kimi-k2.5", "llama"]  # each family's name, and its presets'
    assert "mistral-large-3" in known


@pytest.mark.slow
def test_apply_with_a_model_it_cannot_rehearse_is_exit_2_and_writes_nothing(sandbox, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["MambaForCausalLM"]}))
    before = {p: p.read_bytes() for p in sandbox.site.rglob("*.py")}
    r = sandbox.run("--vllm-version", "0.16", "--model", str(tmp_path))
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr.startswith(f"patch-speculators: error: --model {tmp_path}: the rehearsal has no stand-ins for "
                               "MambaForCausalLM (supported: DeepseekV2ForCausalLM, ")
    assert {p: p.read_bytes() for p in sandbox.site.rglob("*.py")} == before
    assert not sandbox.state.exists() or not any(sandbox.state.rglob("HEAD"))
    j = sandbox.run("--vllm-version", "0.16", "--arch", "gemma", "--json")
    assert j.returncode == 2
    assert json.loads(j.stdout)["error"].startswith("--arch gemma: no such preset")


def test_a_rules_symptoms_name_it_where_no_edit_is_on_the_failing_line() -> None:
    from vllm_shim_patch.report.rehearse import lines
    from vllm_shim_patch.rules.loader import load_pack

    rules = load_pack(()).rules
    worker = "speculators/data_generation/custom_worker.py"
    hooks = Site("worker-capture-hooks", worker, 127, 127, "speculators.data_generation.custom_worker",
                 Action.EDITED, "", True)
    crash = {"outcome": "failed", "failure": {
        "exception": "TypeError: _patched_forward() got an unexpected keyword argument 'deepstack_input_embeds'",
        "speculators_frame": {"file": GEN, "line": 156, "code": "...", "function": "__init__"}}}
    r = interpret(reply(crash), _plan(*SITES, hooks), rules=rules, skipped=frozenset({"worker-capture-hooks"}))
    assert [(s.rule_id, s.action) for s in r.fixes] == [("worker-capture-hooks", Action.SKIPPED)]
    # An opt-in rule the run did not select: the report says which option runs it.
    refused = {"outcome": "failed", "failure": {
        "exception": "ValueError: The repository /tmp/m contains custom code which must be executed to correctly "
                     "load the model. Please pass the argument `trust_remote_code=True` to allow custom code to be run.",
        "speculators_frame": {"file": GEN, "line": 84, "code": "...", "function": "__init__"}}}
    r = interpret(reply(refused), _plan(*SITES), rules=rules)
    assert (r.fixes, r.opt_ins) == ((), (("tokenizer-trust-remote-code", "trust-remote-code"),))
    assert "  fix:         rule tokenizer-trust-remote-code (opt-in: run again with --trust-remote-code)" in lines(r)
    assert r.as_dict()["opt_in_fixes"] == [{"rule": "tokenizer-trust-remote-code", "option": "trust-remote-code"}]
    # With the option given the rule is in the plan; no hint to give it again.
    r = interpret(reply(refused), _plan(*SITES), rules=rules, options=frozenset({"trust-remote-code"}))
    assert r.opt_ins == ()


def test_a_rehearsal_that_could_not_run_names_the_rule_that_keeps_vllm_where_it_can() -> None:
    from vllm_shim_patch.report.rehearse import headline, lines
    from vllm_shim_patch.rules.loader import load_pack

    rules = load_pack(()).rules
    pin = Site("generator-v1-runner", GEN, 118, 118,
               "speculators.data_generation.vllm_hidden_states_generator:VllmHiddenStatesGenerator.__init__",
               Action.EDITED, "", True)
    v2 = {"outcome": "cannot_rehearse", "failure": {
        "exception": "cannot rehearse: vLLM selected Model Runner V2 for the generator (VLLM_USE_V2_MODEL_RUNNER "
                     "is unset): speculators' worker drives the V1 runner, and the rehearsal stands in for the V1 "
                     "runner only",
        "speculators_frame": {"file": GEN, "line": 124, "code": "...", "function": "__init__"}}}
    r = interpret(reply(v2), _plan(*SITES, pin), rules=rules, skipped=frozenset({"generator-v1-runner"}))
    assert [(s.rule_id, s.action) for s in r.fixes] == [("generator-v1-runner", Action.SKIPPED)]
    assert headline(r) == f"rehearsal could not run: {v2['failure']['exception']}"
    assert lines(r) == [f"  fix:         rule generator-v1-runner (skipped with --skip/--only: it would edit {GEN}:118)"]
    # A stand-in gap no rule's symptoms match: nothing is named, no fix line.
    gap = {"outcome": "cannot_rehearse", "failure": {"exception": "cannot rehearse: stand-in X no longer matches"}}
    r = interpret(reply(gap), _plan(*SITES, pin), rules=rules)
    assert (r.fixes, lines(r)) == ((), [])


@pytest.mark.parametrize(("runner", "named"), [("Model Runner V2", "; on Model Runner V2"), ("Model Runner V1", ""),
                                               (None, "")], ids=["v2", "v1", "none"])
def test_the_verdict_names_the_runner_where_it_is_not_v1(runner: str | None, named: str) -> None:
    from vllm_shim_patch.report.rehearse import headline

    failed = {"outcome": "failed", "stage": "generate-1", "architecture": "LlamaForCausalLM", "model": "arch",
              **({"runner": runner} if runner else {}), "failure": {
                  "exception": "KVCacheNotCommitted: KV cache block 5 used past the committed memory",
                  "speculators_frame": {"file": GEN, "line": 325, "code": "...", "function": "generate"}}}
    r = interpret(reply(failed), _plan(*SITES))
    assert headline(r) == (f"rehearsal failed in generate-1 at {GEN}:325: KVCacheNotCommitted: KV cache block 5 "
                           f"used past the committed memory{named}; on a tiny LlamaForCausalLM (--arch preset)")

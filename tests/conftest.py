"""Shared fixtures: throwaway venvs holding the real speculators 0.3.0 wheel, temporary state."""

from __future__ import annotations

import contextlib
import os
import pty
import re
import select
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import realdata  # noqa: E402

# The tool's signature cache (VSP_CACHE_DIR) goes to a folder of this run, never the user's
# ~/.cache: every CLI run of the suite inherits it, and it is removed at the end.
_SIGNATURE_CACHE = tempfile.mkdtemp(prefix="vsp-test-sigcache-")
os.environ["VSP_CACHE_DIR"] = _SIGNATURE_CACHE


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    shutil.rmtree(_SIGNATURE_CACHE, ignore_errors=True)

GENERATOR = "speculators/data_generation/vllm_hidden_states_generator.py"
WORKER = "speculators/data_generation/custom_worker.py"
# The rehearsal's verdict when every sequence of its default (parity) workload is right.
PARITY_PASSED = ("rehearsal passed: 6 calls, 40 sequences (32,697 tokens) match a per-prompt forward row by row; "
                 "chunked prefill in 3 of 9 steps; runner order differed from scheduler order in 3")
# The short workload's (rehearse --quick).
QUICK_PASSED = ("rehearsal passed: 2 calls, 4 sequences (129 tokens) match a per-prompt forward row by row; chunked "
                "prefill in 0 of 2 steps; runner order differed from scheduler order in 0 (--quick: short prompts only, "
                "no chunked prefill; run without --quick for speculators' own workload)")
# What follows it without --model: the architecture rehearsed, and that the user's may differ.
DEFAULT_MODEL = "; rehearsed on a tiny LlamaForCausalLM; pass --model to rehearse your model's architecture"
# The default apply's edits of speculators 0.3.0 for vLLM 0.16: the vLLM rules' 6, the data rules'
# 8 (worker 2, abort 2, results by request 3, flush 1), sample_tokens after the flush's step, and
# the family rules' 6 (no Eagle3 gate: gate, base model, import; capture hooks: the binding, the
# hooks before the class, the `types` import). Not the embedding rename in speculators' own
# forward, which the capture hooks leave unbound: llama-model-embed-input-ids is not needed there.
EDITS = 21
# The audit's section on the imports of other packages in a sandbox (speculators 0.3.0 installed
# alone, --no-deps): none of the packages is installed, so each is one unknown line.
SANDBOX_IMPORTS = [
    '138 imports of other packages, checked in the target (not installed: click, datasets, huggingface_hub, loguru, numpy, pydantic, pydantic_core, rich, safetensors, torch, tqdm, transformers, typer, typing_extensions, wandb)',
    '  speculators/__main__.py:25: import click: unknown (not installed in the target; speculators requires click)',
    '  speculators/__main__.py:26: import typer: unknown (not installed in the target)',
    '  speculators/config.py:25: import pydantic.BaseModel: unknown (not installed in the target; speculators requires pydantic>=2.0.0) (and 13 more imports of pydantic)',
    '  speculators/config.py:26: import transformers.PretrainedConfig: unknown (not installed in the target; speculators requires transformers) (and 51 more imports of transformers)',
    '  speculators/convert/eagle/eagle3_converter.py:7: import torch: unknown (not installed in the target; speculators requires torch) (and 45 more imports of torch)',
    '  speculators/convert/eagle/eagle3_converter.py:8: import loguru.logger: unknown (not installed in the target; speculators requires loguru) (and 3 more imports of loguru)',
    '  speculators/convert/eagle/utils.py:9: import huggingface_hub.snapshot_download: unknown (not installed in the target; speculators requires huggingface-hub) (and 2 more imports of huggingface_hub)',
    '  speculators/convert/eagle/utils.py:11: import safetensors.safe_open: unknown (not installed in the target; speculators requires safetensors) (and 2 more imports of safetensors)',
    '  speculators/data_generation/preprocessing.py:6: import datasets.Dataset: unknown (not installed in the target; speculators requires datasets>=4.0.0) (and 2 more imports of datasets)',
    '  speculators/models/eagle.py:28: import typing_extensions.Self: unknown (not installed in the target)',
    '  speculators/train/distributed_batch_sampler.py:32: import numpy: unknown (not installed in the target; speculators requires numpy) (and 2 more imports of numpy)',
    '  speculators/train/logger.py:65: import rich.logging.RichHandler: unknown (not installed in the target; speculators requires rich)',
    '  speculators/train/logger.py:69: import wandb.Run: unknown (not installed in the target)',
    '  speculators/train/trainer.py:9: import tqdm.TqdmExperimentalWarning: unknown (not installed in the target; speculators requires tqdm) (and 2 more imports of tqdm)',
    '  speculators/utils/pydantic_utils.py:18: import pydantic_core.CoreSchema: unknown (not installed in the target) (and 1 more import of pydantic_core)',
]
SANDBOX_IMPORTS_COUNT = "138 imports of other packages: 0 ok, 0 fixed by the rules, 0 still mismatched, 138 unknown"


@dataclass
class Sandbox:
    """A venv with speculators installed by pip, and a state dir of its own."""

    root: Path
    python: Path
    site: Path
    state: Path
    # Options given before the command on every run (e.g. more --rules).
    extra: tuple[str, ...] = ()

    def run(self, *args: str, env: dict[str, str] | None = None, timeout: float = 300,
            python_first: bool = True) -> subprocess.CompletedProcess[str]:
        """Run the CLI as a user would, in its own process (crashes and locks are real)."""
        base = ["--python", str(self.python), "--state-dir", str(self.state), *self.extra] if python_first else []
        inherited = {k: v for k, v in os.environ.items() if not k.startswith("VSP_TEST_")}
        full_env = {**inherited, **(env or {})}
        return subprocess.run(
            [sys.executable, "-m", "vllm_shim_patch", *base, *args],
            capture_output=True, text=True, timeout=timeout, env=full_env,
        )

    @contextlib.contextmanager
    def paused(self, pause_at: int, flag: Path, *args: str) -> Iterator[subprocess.Popen[str]]:
        """Run the CLI until its `pause_at`-th checkpoint and hold it there while the body runs."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("VSP_TEST_")}
        proc = subprocess.Popen(
            [sys.executable, "-m", "vllm_shim_patch", "--python", str(self.python), "--state-dir",
             str(self.state), *self.extra, *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**env, "VSP_TEST_PAUSE_AT": str(pause_at), "VSP_TEST_PAUSE_FILE": str(flag)},
        )
        try:
            deadline = time.monotonic() + 60
            while not flag.exists():
                assert proc.poll() is None, proc.communicate()
                assert time.monotonic() < deadline, "the run never reached its pause"
                time.sleep(0.02)
            yield proc
        finally:
            flag.unlink(missing_ok=True)
            proc.communicate(timeout=120)

    def record(self) -> dict[str, str]:
        dist = next(self.site.glob("speculators-*.dist-info"))
        out = {}
        for line in (dist / "RECORD").read_text().splitlines():
            path, digest, _ = line.rsplit(",", 2)
            if digest:
                out[path] = digest
        return out

    def snapshot(self) -> dict[str, bytes]:
        """Every file of the distribution, bytes, keyed by RECORD path (bytecode excluded)."""
        return {p: (self.site / p).read_bytes() for p in self.record()}

    def pip_reinstall(self, wheel: Path) -> None:
        subprocess.run(
            [sys.executable, "-m", "pip", "--python", str(self.python), "install", "--quiet",
             "--no-deps", "--force-reinstall", str(wheel)],
            check=True, capture_output=True,
        )


def scoped_codemod_rule(folder: Path, name: str, module: str, leave_name: str, at_import: str = "") -> Path:
    """A rule file with one `in:` rule over speculators' custom_worker whose codemod `name` runs
    `leave_name` (a statement) in leave_Name, and `at_import` when it is loaded."""
    (folder / "codemods").mkdir(exist_ok=True)
    (folder / "codemods" / f"{name}.py").write_text(
        "from vllm_shim_patch.rewrite.scoped import ScopedTransform\n" + at_import + "\n"
        "class Codemod(ScopedTransform):\n"
        "    def leave_Name(self, original_node, updated_node):\n"
        f"        {leave_name}\n"
    )
    rules = folder / "rules.yaml"
    rules.write_text(f"schema: 1\nrules:\n  - id: {name}\n    in: {module}\n"
                     f'    since: "0.1"\n    codemod: {name}\n    why: w\n')
    return rules


def write_tree(root: Path, files: dict[str, bytes]) -> Path:
    """Write `files` (relative path → bytes) under `root`; return `root`."""
    for path, data in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)
    return root


def _make_venv(dest: Path, wheel: Path) -> None:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(dest)], check=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(dest / "bin" / "python"), "install", "--quiet",
         "--no-deps", str(wheel)],
        check=True, capture_output=True,
    )


# The tiers are explicit marks, written on each test (or its module's `pytestmark`): `slow` builds
# throwaway venvs, needs the real speculators wheel or reads the real vLLM sources; `realvllm` needs
# the cached venv with the reference vLLM really installed (and is slow too). A test that uses a
# fixture of a tier without carrying its mark is a collection error, so the unit tier
# (`-m "not slow and not realvllm"`) cannot grow a venv by accident.
TIER_FIXTURES = {
    "slow": frozenset({"sandbox", "sandbox_template", "speculators_wheel", "reference_vllm_source",
                       "vllm_venv_python", "vllm_site"}),
    "realvllm": frozenset({"vllm_venv_python", "vllm_site"}),
}


def unmarked(item: pytest.Item) -> list[str]:
    """The tiers `item` uses a fixture of but does not carry the mark of."""
    used = set(getattr(item, "fixturenames", ()))
    return [tier for tier, names in TIER_FIXTURES.items()
            if used & names and item.get_closest_marker(tier) is None]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Under pytest-xdist the workers collect, and a worker's UsageError never reaches the report:
    # there each unmarked test fails instead (pytest_runtest_setup), naming its missing mark.
    if getattr(config, "workerinput", None) is not None:
        return
    missing = [f"{item.nodeid}: mark it {', '.join(unmarked(item))}" for item in items if unmarked(item)]
    if missing:
        raise pytest.UsageError("tests without their tier's mark:\n" + "\n".join(missing))


def pytest_runtest_setup(item: pytest.Item) -> None:
    if unmarked(item):
        pytest.fail(f"test without its tier's mark: {item.nodeid}: mark it {', '.join(unmarked(item))}",
                    pytrace=False)


# What fetches the real parts into the test cache (from the package index, or Debian's archive
# when it is not cached there yet). The unit tier is hermetic: a fresh clone with a cold cache and
# no network runs it, so a unit test reaching one of these (even where the cache holds the part)
# is an error that names its tier, not a download.
REALDATA_FETCHERS = ("speculators_wheel", "vllm_source", "debian_python", "_download")


def _refuse_fetch(name: str, nodeid: str) -> object:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"{nodeid} is a unit test and asks for real data (realdata.{name}): "
                             f"mark it slow, or give it a fixture of its own")

    return refuse


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Around a unit test's setup, call and teardown (its module's and session's fixtures set up
    for it included), the fetchers refuse."""
    if any(item.get_closest_marker(tier) is not None for tier in TIER_FIXTURES):
        yield
        return
    saved = {name: getattr(realdata, name) for name in REALDATA_FETCHERS}
    for name in REALDATA_FETCHERS:
        setattr(realdata, name, _refuse_fetch(name, item.nodeid))
    try:
        yield
    finally:
        for name, fetch in saved.items():
            setattr(realdata, name, fetch)


@pytest.fixture(scope="session")
def speculators_wheel() -> Path:
    """The real wheel of the oldest speculators (realdata.OLD_SPECULATORS)."""
    return realdata.speculators_wheel()


@pytest.fixture(scope="session")
def reference_vllm_source() -> Path:
    """The real source of the reference vLLM release (realdata.REFERENCE_VLLM)."""
    return realdata.vllm_source()


@pytest.fixture(scope="session")
def sandbox_template(tmp_path_factory: pytest.TempPathFactory, speculators_wheel: Path) -> Path:
    root = tmp_path_factory.mktemp("template") / "venv"
    _make_venv(root, speculators_wheel)
    return root


@pytest.fixture
def sandbox(tmp_path: Path, sandbox_template: Path) -> Sandbox:
    root = tmp_path / "venv"
    shutil.copytree(sandbox_template, root, symlinks=True)
    site = next(root.glob("lib/python3*/site-packages"))
    return Sandbox(root, root / "bin" / "python", site, tmp_path / "state")


# The real reference vLLM venv (realdata.REFERENCE_VLLM), built once and cached outside the repo by tests/e2e/build_env.py
# (keyed by the committed constraints file); tests never modify it.
E2E = Path(__file__).parent / "e2e"


@pytest.fixture(scope="session")
def vllm_venv_python() -> Path:
    proc = subprocess.run([sys.executable, str(E2E / "build_env.py"), "--print-path"],
                          capture_output=True, text=True, timeout=3600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return Path(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def vllm_site(vllm_venv_python: Path) -> Path:
    out = subprocess.run([str(vllm_venv_python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                         capture_output=True, text=True, check=True).stdout.strip()
    return Path(out)


def real_sandbox(root: Path, vllm_venv_python: Path, vllm_site: Path, wheel: Path) -> Sandbox:
    """A small venv holding its own speculators (--no-deps) that sees the cached vLLM."""
    subprocess.run([str(vllm_venv_python), "-m", "venv", "--without-pip", str(root / "venv")], check=True)
    python = root / "venv" / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               capture_output=True, text=True, check=True).stdout.strip())
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps",
                    str(wheel)], check=True, capture_output=True)
    # After our own site-packages: this venv's speculators wins, the cached vLLM is found.
    (site / f"zz-vllm-{realdata.REFERENCE_VLLM}.pth").write_text(f"{vllm_site}\n")
    return Sandbox(root / "venv", python, site, root / "state")


@pytest.fixture
def real(tmp_path: Path, vllm_venv_python: Path, vllm_site: Path, speculators_wheel: Path) -> Sandbox:
    return real_sandbox(tmp_path, vllm_venv_python, vllm_site, speculators_wheel)


# What `-i` asks before each hunk: "(3/13) apply this hunk? [y,n,a,q]".
HUNK_PROMPT = re.compile(r"\(\d+/\d+\) apply this hunk\? \[y,n,a,q\]")


def run_on_tty(sb: Sandbox, answers: str, *args: str, timeout: float = 120,
               prompt: re.Pattern[str] = HUNK_PROMPT) -> tuple[int, str]:
    """Run the CLI on a real terminal (a pty) and answer its prompts; (exit code, the screen).

    `answers` holds one line per prompt, in order; each is typed only once its prompt is on the
    screen, as a user would, never ahead of it (what a process reads from the terminal before the
    prompt, or how the terminal echoes typed-ahead lines, must not decide the test). A prompt
    with no answer left, or an answer left when the CLI ends, fails the test. `timeout` only
    keeps a hung CLI from hanging the suite."""
    lines = answers.splitlines(keepends=True)
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "vllm_shim_patch", "--python", str(sb.python), "--state-dir", str(sb.state),
         *sb.extra, *args],
        stdin=slave, stdout=slave, stderr=slave, close_fds=True,
        env={k: v for k, v in os.environ.items() if not k.startswith("VSP_TEST_")},
    )
    os.close(slave)
    out = b""
    typed = 0

    def stop(why: str) -> AssertionError:
        proc.kill()
        proc.wait()
        os.close(master)
        return AssertionError(f"{why}; screen:\n" + out.decode(errors="replace"))

    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([master], [], [], left)[0]:
            raise stop(f"no end within {timeout:g}s")
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
        asked = len(prompt.findall(out.decode(errors="replace")))
        while typed < asked:
            if typed == len(lines):
                raise stop(f"prompt {typed + 1} has no answer (the test gives {len(lines)})")
            os.write(master, lines[typed].encode())
            typed += 1
    os.close(master)
    code = proc.wait(timeout=timeout)
    screen = out.decode(errors="replace").replace("\r\n", "\n")
    assert typed == len(lines), f"{len(lines) - typed} answers left unasked (exit {code}); screen:\n{screen}"
    return code, screen

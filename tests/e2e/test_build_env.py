"""tests/e2e/build_env.py's recipes: what each committed constraints file says is installed, how.

Unit tier: the script's functions on the committed files, nothing built.
"""

from __future__ import annotations

import hashlib
import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import realdata

E2E = Path(__file__).resolve().parent


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("build_env", E2E / "build_env.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("build_env", module)
    spec.loader.exec_module(module)
    return module


be = _load()
RELEASES = sorted(p.name[len("constraints-vllm-"):-len(".txt")] for p in E2E.glob("constraints-vllm-*.txt"))


def _recipe(vllm: str):  # type: ignore[no-untyped-def]
    path = be.constraints_path(vllm)
    return be.Recipe.from_file(vllm, path, path.read_text())


def test_the_reference_is_installed_with_uv_from_the_pins_pip_froze() -> None:
    r = _recipe(realdata.REFERENCE_VLLM)
    assert (r.installer, r.requirements) == ("uv", [f"vllm=={realdata.REFERENCE_VLLM}", "loguru", "setuptools"])
    # The venv's cache key (a new file, a new venv) and its pins: the 178 lines pip froze, as
    # they were (so uv installs the environment pip made).
    assert hashlib.sha256(r.constraints.read_bytes()).hexdigest()[:12] == "01eb5e526499"
    pins = "".join(f"{line}\n" for line in r.constraints.read_text().splitlines()
                   if line and not line.startswith("#"))
    assert (len(pins.splitlines()), hashlib.sha256(pins.encode()).hexdigest()[:16]) == (178, "a0b264723776e692")


def test_a_file_without_an_installer_line_is_installed_with_pip(tmp_path: Path) -> None:
    path = tmp_path / "constraints-vllm-9.9.9.txt"
    r = be.Recipe.from_file("9.9.9", path, "# pinned by hand\nvllm==9.9.9\n")
    assert (r.installer, r.requirements) == ("pip", ["vllm==9.9.9", *be.EXTRA_PACKAGES])


@pytest.mark.parametrize("vllm", [v for v in RELEASES if v != realdata.REFERENCE_VLLM])
def test_a_frozen_release_is_installed_with_uv_and_pins_its_requirements(vllm: str) -> None:
    r = _recipe(vllm)
    pins = be.parse_pins(r.constraints.read_text(), r.constraints)
    assert r.installer == "uv"
    assert r.requirements[:5] == [f"vllm=={vllm}", *be.FREEZE_PACKAGES]
    assert pins["vllm"] == vllm and pins["speculators"] == realdata.OLD_SPECULATORS
    assert all(be.normalize(req.split(">=")[0].split("==")[0]) in pins for req in r.requirements)
    be.check_cuda_pair(pins)  # raises on a pairing whose files overwrite each other


def test_the_033_constraints_pin_cuda_python_13() -> None:
    text = be.constraints_path("0.33.0").read_text()
    assert be.header_value(text, "requirements") == (
        "vllm==0.33.0 loguru setuptools pydantic-settings typer-slim cuda-python>=13")
    pins = be.parse_pins(text, be.constraints_path("0.33.0"))
    assert (pins["cuda-python"], pins["cuda-bindings"]) == ("13.4.4", "13.4.4")


@pytest.mark.parametrize(("pins", "error"), [
    ({"cuda-bindings": "13.5.0", "cuda-python": "12.6.2.post1"},
     "the resolve paired cuda-bindings 13.5.0 with cuda-python 12.6.2.post1, whose files overwrite "
     "the bindings; freeze again with --require 'cuda-python>=13'"),
    ({"cuda-bindings": "13.4.4", "cuda-python": "13.4.4"}, None),
    ({"cuda-bindings": "13.5.0"}, None),
], ids=["mismatched", "same-major", "bindings-alone"])
def test_a_freeze_refuses_a_cuda_python_of_another_major(pins: dict[str, str], error: str | None) -> None:
    if error is None:
        be.check_cuda_pair(pins)
    else:
        with pytest.raises(be.BuildError) as caught:
            be.check_cuda_pair(pins)
        assert str(caught.value) == error


def test_a_frozen_file_reads_back_as_its_recipe(tmp_path: Path) -> None:
    text = be.constraints_text("9.9.9", ["vllm==9.9.9", *be.FREEZE_PACKAGES, "cuda-python>=13"],
                               {"vllm": "9.9.9", "torch": "2.9.0"}, sys.executable)
    path = tmp_path / "constraints-vllm-9.9.9.txt"
    path.write_text(text)
    r = be.Recipe.from_file("9.9.9", path, text)
    assert (r.installer, r.requirements) == ("uv", ["vllm==9.9.9", *be.FREEZE_PACKAGES, "cuda-python>=13"])
    assert be.parse_pins(text, path) == {"torch": "2.9.0", "vllm": "9.9.9"}
    assert "#   python tests/e2e/build_env.py --vllm 9.9.9 --freeze --require 'cuda-python>=13'\n" in text


def test_an_override_is_recorded_and_installed_from_the_file_alone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # vLLM 0.34.0 pins flashinfer-python==0.7.3, which the index never had.
    requirements = ["vllm==9.9.9", *be.FREEZE_PACKAGES]
    text = be.constraints_text("9.9.9", requirements, {"vllm": "9.9.9"}, sys.executable,
                               ["flashinfer-python==0.7.4"])
    assert "--freeze --override 'flashinfer-python==0.7.4'\n" in text
    assert "\n# vsp-overrides: flashinfer-python==0.7.4\n" in text
    path = tmp_path / "constraints-vllm-9.9.9.txt"
    path.write_text(text)
    recipe = be.Recipe.from_file("9.9.9", path, text)
    assert recipe.overrides == ["flashinfer-python==0.7.4"]
    commands: list[list[str]] = []
    monkeypatch.setattr(be, "uv_exe", lambda: "uv")
    monkeypatch.setattr(be, "run", lambda cmd, what, **kw: commands.append(cmd) or "")
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    be.install(recipe, venv / "bin" / "python")
    override = str(venv / ".vsp-overrides.txt")
    assert commands[0][commands[0].index("--override") + 1] == override
    assert (venv / ".vsp-overrides.txt").read_text() == "flashinfer-python==0.7.4\n"


def test_overrides_need_uv(tmp_path: Path) -> None:
    path = tmp_path / "constraints-vllm-9.9.9.txt"
    with pytest.raises(be.BuildError, match=r"^constraints-vllm-9\.9\.9\.txt: vsp-overrides needs vsp-installer uv$"):
        be.Recipe.from_file("9.9.9", path, "# vsp-installer: pip\n# vsp-overrides: a==1\nvllm==9.9.9\n")


def test_an_unknown_installer_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "constraints-vllm-9.9.9.txt"
    with pytest.raises(be.BuildError, match=r"^constraints-vllm-9\.9\.9\.txt: unknown vsp-installer 'conda' \(pip or uv\)$"):
        be.Recipe.from_file("9.9.9", path, "# vsp-installer: conda\nvllm==9.9.9\n")


# A release without a committed constraints file, built with the script's own logic: uv's install,
# its freeze and the import check are stood in (a real one is a 10 GB download); the venv itself,
# the lock, the marker, the atomic rename and the post-move check are real.
UNCOMMITTED = "9.9.9"
RESOLVED = {"vllm": UNCOMMITTED, "speculators": realdata.OLD_SPECULATORS, "torch": "2.9.0"}


@pytest.fixture
def fake_uv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Every install's requirements, in order; the cache is under tmp_path."""
    monkeypatch.setenv("VSP_TEST_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("VSP_SKIP_DISK_CHECK", "1")
    monkeypatch.setattr(be, "find_python", lambda explicit: sys.executable)
    installs: list[list[str]] = []
    monkeypatch.setattr(be, "install", lambda recipe, py: installs.append(list(recipe.requirements)))
    monkeypatch.setattr(be, "freeze", lambda py, installer: dict(RESOLVED))
    monkeypatch.setattr(be, "import_check", lambda py, recipe: None)
    assert not be.constraints_path(UNCOMMITTED).exists()
    return installs


def _main(monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, list[str]]:
    monkeypatch.setattr(sys, "argv", ["build_env.py", "--vllm", UNCOMMITTED, *args])
    rc = be.main()
    out, err = capfd.readouterr()
    return rc, out, err.splitlines()


def _said(err: list[str], start: str) -> list[str]:
    return [line for line in err if line.startswith(f"[build_env] {start}")]


def test_a_release_without_committed_constraints_resolves_afresh_into_the_cache(
        tmp_path: Path, fake_uv: list[list[str]], monkeypatch: pytest.MonkeyPatch,
        capfd: pytest.CaptureFixture[str]) -> None:
    rc, out, err = _main(monkeypatch, capfd)
    venvs = tmp_path / "cache" / "venvs"
    pins = venvs / f"constraints-vllm-{UNCOMMITTED}.txt"
    requirements = [f"vllm=={UNCOMMITTED}", *be.FREEZE_PACKAGES]
    text = be.constraints_text(UNCOMMITTED, requirements, RESOLVED, sys.executable)
    digest = hashlib.sha256(text.encode()).hexdigest()
    final = venvs / f"vllm-{UNCOMMITTED}-{digest[:12]}"
    assert rc == 0
    assert out.splitlines()[-1] == str(final / "bin" / "python")
    assert fake_uv == [requirements]
    # What --freeze would write, byte for byte: copied into tests/e2e/ it keys this same venv.
    assert pins.read_text() == text
    assert (final / be.MARKER).read_text() == digest + "\n"
    assert not be.constraints_path(UNCOMMITTED).exists()
    assert sorted(p.name for p in venvs.iterdir()) == sorted(
        [pins.name, final.name, f".vllm-{UNCOMMITTED}-freeze.lock", f".{final.name}-bytecode.lock"])
    assert (final / be.BYTECODE_MARKER).read_text() == sys.implementation.cache_tag + "\n"
    said = _said(err, "no committed")
    assert len(said) == 1
    prefix = (f"[build_env] no committed constraints-vllm-{UNCOMMITTED}.txt: resolved vLLM {UNCOMMITTED} "
              f"afresh with uv and froze its 3 pins to {pins} (copy it to tests/e2e/ to commit them); "
              f"venv {final} in ")
    assert said[0].startswith(prefix) and said[0][len(prefix):].rstrip("s").isdigit()


def test_the_cached_pins_of_an_uncommitted_release_are_reused(
        tmp_path: Path, fake_uv: list[list[str]], monkeypatch: pytest.MonkeyPatch,
        capfd: pytest.CaptureFixture[str]) -> None:
    assert _main(monkeypatch, capfd)[0] == 0
    pins = tmp_path / "cache" / "venvs" / f"constraints-vllm-{UNCOMMITTED}.txt"
    rc, out, err = _main(monkeypatch, capfd, "--cached-only")
    assert (rc, fake_uv) == (0, [[f"vllm=={UNCOMMITTED}", *be.FREEZE_PACKAGES]])
    assert _said(err, "no committed") == [
        f"[build_env] no committed constraints-vllm-{UNCOMMITTED}.txt: using the pins frozen before to {pins}"]
    assert _said(err, "venv ") == [f"[build_env] venv reused: {Path(out.splitlines()[-1]).parent.parent}"]


def test_a_lost_venv_is_built_again_from_the_cached_pins_not_resolved(
        tmp_path: Path, fake_uv: list[list[str]], monkeypatch: pytest.MonkeyPatch,
        capfd: pytest.CaptureFixture[str]) -> None:
    assert _main(monkeypatch, capfd)[0] == 0
    venvs = tmp_path / "cache" / "venvs"
    pins = venvs / f"constraints-vllm-{UNCOMMITTED}.txt"
    shutil.rmtree(next(venvs.glob(f"vllm-{UNCOMMITTED}-*")))
    rc, out, err = _main(monkeypatch, capfd)
    assert rc == 0
    # The second install is from the cached file, as from a committed one: -c and the same names.
    assert fake_uv == [[f"vllm=={UNCOMMITTED}", *be.FREEZE_PACKAGES]] * 2
    assert _said(err, "venv ") == [f"[build_env] venv built: {Path(out.splitlines()[-1]).parent.parent}"]
    assert pins.read_text() == be.constraints_text(
        UNCOMMITTED, [f"vllm=={UNCOMMITTED}", *be.FREEZE_PACKAGES], RESOLVED, sys.executable)


def test_cached_only_names_the_build_command_for_an_uncommitted_release(
        fake_uv: list[list[str]], monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> None:
    rc, out, err = _main(monkeypatch, capfd, "--cached-only")
    assert (rc, out, fake_uv) == (3, "", [])
    assert err == [f"build_env: vLLM {UNCOMMITTED} has no committed constraints and its venv is not built "
                   f"(build it with: python tests/e2e/build_env.py --vllm {UNCOMMITTED})"]


def test_a_require_the_cached_pins_lack_resolves_again(
        tmp_path: Path, fake_uv: list[list[str]], monkeypatch: pytest.MonkeyPatch,
        capfd: pytest.CaptureFixture[str]) -> None:
    assert _main(monkeypatch, capfd)[0] == 0
    assert _main(monkeypatch, capfd, "--require", "cuda-python>=13")[0] == 0
    # Pins resolved with the --require answer a later run without it.
    assert _main(monkeypatch, capfd)[0] == 0
    plain = [f"vllm=={UNCOMMITTED}", *be.FREEZE_PACKAGES]
    assert fake_uv == [plain, [*plain, "cuda-python>=13"]]
    pins = tmp_path / "cache" / "venvs" / f"constraints-vllm-{UNCOMMITTED}.txt"
    assert be.header_value(pins.read_text(), "requirements") == " ".join([*plain, "cuda-python>=13"])


def test_a_failed_resolve_of_an_uncommitted_release_leaves_nothing(
        tmp_path: Path, fake_uv: list[list[str]], monkeypatch: pytest.MonkeyPatch,
        capfd: pytest.CaptureFixture[str]) -> None:
    def broken(py: Path, recipe: object) -> None:
        raise be.BuildError("import check failed")

    monkeypatch.setattr(be, "import_check", broken)
    rc, out, err = _main(monkeypatch, capfd)
    assert (rc, out, err[-1]) == (1, "", "build_env: error: import check failed")
    venvs = tmp_path / "cache" / "venvs"
    assert [p.name for p in venvs.iterdir()] == [f".vllm-{UNCOMMITTED}-freeze.lock"]


def test_an_uncommitted_release_s_cuda_mismatch_says_to_run_again_with_the_require(
        fake_uv: list[list[str]], monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(be, "freeze", lambda py, installer: {**RESOLVED, "cuda-bindings": "13.5.0",
                                                              "cuda-python": "12.6.2.post1"})
    rc, _, err = _main(monkeypatch, capfd)
    assert (rc, err[-1]) == (1, "build_env: error: the resolve paired cuda-bindings 13.5.0 with cuda-python "
                                "12.6.2.post1, whose files overwrite the bindings; run again with "
                                "--require 'cuda-python>=13'")


def test_a_resolve_waiting_for_the_lock_takes_the_pins_a_concurrent_run_froze(
        tmp_path: Path, fake_uv: list[list[str]]) -> None:
    pins = tmp_path / "cache" / "venvs" / f"constraints-vllm-{UNCOMMITTED}.txt"
    pins.parent.mkdir(parents=True)
    pins.write_text(be.constraints_text(UNCOMMITTED, [f"vllm=={UNCOMMITTED}", *be.FREEZE_PACKAGES],
                                        RESOLVED, sys.executable))
    assert be.resolve_uncommitted(UNCOMMITTED, None, []) is None
    assert fake_uv == []


def test_a_require_with_a_committed_release_is_an_error(
        monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "argv", ["build_env.py", "--vllm", "0.33.0", "--require", "cuda-python>=13"])
    assert be.main() == 1
    assert capfd.readouterr().err.splitlines() == [
        "build_env: error: --require is for --freeze or a release without committed constraints "
        "(constraints-vllm-0.33.0.txt pins the rest)"]


def _site(venv: Path) -> Path:
    return venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


def test_the_bytecode_of_a_venv_is_compiled_once_beside_its_sources(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    (_site(venv) / "pkg").mkdir()
    (_site(venv) / "pkg" / "__init__.py").write_text("X = 1\n")
    # A file of another Python's syntax (a template) is left to fail at import, as pip leaves it.
    (_site(venv) / "pkg" / "template.py").write_text("def f(:\n")
    be.ensure_bytecode(venv)
    cached = sorted(p.name for p in (_site(venv) / "pkg" / "__pycache__").iterdir())
    assert cached == [f"__init__.{sys.implementation.cache_tag}.pyc"]
    assert (venv / be.BYTECODE_MARKER).read_text() == sys.implementation.cache_tag + "\n"
    # The marker says it is done: a module added later is not compiled by a second call.
    (_site(venv) / "pkg" / "later.py").write_text("Y = 2\n")
    be.ensure_bytecode(venv)
    assert sorted(p.name for p in (_site(venv) / "pkg" / "__pycache__").iterdir()) == cached


def test_a_venv_whose_python_cannot_compile_is_a_build_error(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("#!/bin/sh\necho broken >&2\nexit 3\n")
    (venv / "bin" / "python").chmod(0o755)
    with pytest.raises(be.BuildError) as caught:
        be.ensure_bytecode(venv)
    assert str(caught.value) == f"compiling the bytecode of {venv} failed (exit 3)\nbroken\n"
    assert not (venv / be.BYTECODE_MARKER).exists()

"""tests/e2e/build_env.py's recipes: what each committed constraints file says is installed, how.

Unit tier: the script's functions on the committed files, nothing built.
"""

from __future__ import annotations

import hashlib
import importlib.util
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


def test_the_reference_keeps_its_pip_recipe_and_cache_key() -> None:
    # The cached reference venv is keyed by this file's sha256: a uv switch would rebuild it.
    r = _recipe(realdata.REFERENCE_VLLM)
    assert (r.installer, r.requirements) == ("pip", [f"vllm=={realdata.REFERENCE_VLLM}", "loguru", "setuptools"])
    assert hashlib.sha256(r.constraints.read_bytes()).hexdigest()[:12] == "4140ffc51493"


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


def test_an_unknown_installer_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "constraints-vllm-9.9.9.txt"
    with pytest.raises(be.BuildError, match=r"^constraints-vllm-9\.9\.9\.txt: unknown vsp-installer 'conda' \(pip or uv\)$"):
        be.Recipe.from_file("9.9.9", path, "# vsp-installer: conda\nvllm==9.9.9\n")

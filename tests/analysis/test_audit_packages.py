"""The audit of the imports of other packages, answered in a real interpreter (this one, with small
fixture packages on its path) through the target session: a lazy package, a missing module, a
missing name, a package that raises on import, one not installed, and the feature tests."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from vllm_shim_patch.analysis.audit import audit_plan
from vllm_shim_patch.analysis.calls import scan_imports
from vllm_shim_patch.analysis.packages import PackageAudit, PackageChecker, audit_packages, request
from vllm_shim_patch.analysis.session import run_session
from vllm_shim_patch.report.audit import render
from vllm_shim_patch.rewrite.results import FileResult, Site
from vllm_shim_patch.kinds import Action, FileStatus
from vllm_shim_patch.target import Target

# transformers' `_LazyModule` in small: the module replaces itself in sys.modules, and a name is
# defined only when first read, by importing the submodule that holds it (which may fail).
LAZY_INIT = b'''\
import importlib
import sys
import types

_WHERE = {"Config": "configuration", "Broken": "broken"}


class _Lazy(types.ModuleType):
    def __getattr__(self, name):
        if name not in _WHERE:
            raise AttributeError(name)
        try:
            module = importlib.import_module("." + _WHERE[name], self.__name__)
        except Exception as exc:
            raise RuntimeError(f"Failed to import lazypkg.{_WHERE[name]} because of the following error:\\n{exc}") from exc
        return getattr(module, name)


sys.modules[__name__].__class__ = _Lazy
'''

FIXTURES = {
    "lazypkg/__init__.py": LAZY_INIT,
    "lazypkg/configuration.py": b"class Config:\n    pass\n",
    "lazypkg/broken.py": b"import nosuch_dependency_of_lazypkg\nBroken = 1\n",
    "lazypkg/utils.py": b"def helper():\n    pass\n",
    "lazypkg-2.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: lazypkg\nVersion: 2.0\n",
    "lazypkg-2.0.dist-info/top_level.txt": b"lazypkg\n",
    "raisespkg/__init__.py": b"raise ValueError('raisespkg needs a GPU:\\nnone found')\n",
    "pkg-1.0.dist-info/METADATA": (b"Metadata-Version: 2.1\nName: pkg\nVersion: 1.0\n"
                                   b"Requires-Dist: nosuchpkg-vsp>=2\nRequires-Dist: lazypkg\n"
                                   b"Requires-Dist: nosuchextra-vsp; extra == 'fast'\n"),
}

MODULE = b'''\
from __future__ import annotations

import os
from typing import TYPE_CHECKING

import vllm
from vllm.config import VllmConfig
from pkg import other
from . import sibling
from lazypkg import Config
from lazypkg import Broken
from lazypkg import utils, Missing
from lazypkg.utils import helper, gone
import lazypkg.nosuchmodule
import raisespkg
import nosuchpkg_vsp.sub
from nosuchpkg_vsp import thing
import nosuchextra_vsp

try:
    from lazypkg.optional import Fast
except ImportError:
    Fast = None

if TYPE_CHECKING:
    from lazypkg.typing_only import Hint


def later():
    from lazypkg.utils import late
'''


@pytest.fixture
def target(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Target:
    root = tmp_path / "site"
    for rel, data in FIXTURES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    monkeypatch.setenv("PYTHONPATH", str(root))
    return Target(python=sys.executable, python_version="3", package="pkg", version="1.0", location=root,
                  record=(), editable=None, vllm_version=None, vllm_location=None)


def audited(target: Target, pending: list[FileResult] | None = None) -> tuple[PackageAudit, dict[str, Any]]:
    uses = {"pkg/m.py": scan_imports(MODULE, "pkg/m.py", {"pkg", "vllm"})}
    after = {r.path: scan_imports(r.after, r.path, {"pkg", "vllm"}) for r in pending or ()}
    wanted = request([u for group in (*uses.values(), *after.values()) for u in group])
    answer = run_session(target, packages=wanted).packages
    assert answer is not None
    checker = PackageChecker(answer, target.package)
    return audit_packages(audit_plan(pending or [], uses, after, checker, "0.16"), checker), answer


def test_each_import_is_answered_by_a_real_import(target: Target) -> None:
    packages, answer = audited(target)
    text, data = render([], "pkg 1.0", "vLLM 0.16.0", verbose=False, packages=packages)
    assert text.splitlines() == [
        "pkg 1.0 against vLLM 0.16.0: 0 uses of vLLM",
        # raisespkg lies on the path without a dist-info: no distribution to name.
        "14 imports of other packages, checked in the target (lazypkg 2.0, raisespkg (no distribution); "
        "not installed: nosuchextra_vsp, nosuchpkg_vsp)",
        "  pkg/m.py:11: import lazypkg.Broken: mismatch (from lazypkg import Broken fails: RuntimeError: Failed to import "
        "lazypkg.broken because of the following error: No module named 'nosuch_dependency_of_lazypkg') "
        "-> no rule fixes this",
        "  pkg/m.py:12: import lazypkg.Missing: mismatch (lazypkg has no name 'Missing') -> no rule fixes this",
        "  pkg/m.py:13: import lazypkg.utils.gone: mismatch (lazypkg.utils has no name 'gone') -> no rule fixes this",
        "  pkg/m.py:14: import lazypkg.nosuchmodule: mismatch (no module lazypkg.nosuchmodule) -> no rule fixes this",
        "  pkg/m.py:15: import raisespkg: mismatch (import of raisespkg fails: ValueError: raisespkg needs a GPU: "
        "none found) -> no rule fixes this",
        "  pkg/m.py:16: import nosuchpkg_vsp.sub: unknown (not installed in the target; pkg requires nosuchpkg-vsp>=2) "
        "(and 1 more import of nosuchpkg_vsp)",
        # An extra's requirement: optional, and said so.
        "  pkg/m.py:18: import nosuchextra_vsp: unknown (not installed in the target; pkg requires nosuchextra-vsp "
        "when extra == 'fast')",
        "  pkg/m.py:21: import lazypkg.optional.Fast: unknown (no module lazypkg.optional; "
        "in the try/except ImportError at line 20)",
        "  pkg/m.py:26: import lazypkg.typing_only.Hint: unknown (no module lazypkg.typing_only; "
        "under `if TYPE_CHECKING` at line 25)",
        # A function's import runs when it is called: as broken as one at the top.
        "  pkg/m.py:30: import lazypkg.utils.late: mismatch (lazypkg.utils has no name 'late') -> no rule fixes this",
        "0 uses: 0 ok, 0 fixed by the rules, 0 still mismatched, 0 unknown; "
        "14 imports of other packages: 3 ok, 0 fixed by the rules, 6 still mismatched, 5 unknown",
    ]
    # The standard library is not imported, nor a package no finder knows.
    assert {t for t, v in answer["tops"].items() if v["stdlib"]} == {"__future__", "os", "typing"}
    assert not any(m.startswith(("os", "typing", "__future__", "nosuchpkg_vsp")) for m in answer["modules"])
    assert data["packages"]["summary"] == {"uses": 14, "added": 0, "ok": 3, "fixed": 0, "remaining": 6,
                                           "unknown": 5}
    assert data["packages"]["not_installed"] == {
        "nosuchextra_vsp": "not installed in the target; pkg requires nosuchextra-vsp when extra == 'fast'",
        "nosuchpkg_vsp": "not installed in the target; pkg requires nosuchpkg-vsp>=2"}
    assert data["packages"]["distributions"] == {"lazypkg": ["lazypkg 2.0"], "raisespkg": []}
    # The lazy package's Config exists only once read; a submodule is found as `from` finds it.
    assert [(u["line"], u["callee"]) for u in data["packages"]["uses"] if u["status"] == "ok"] == [
        (10, "lazypkg.Config"), (12, "lazypkg.utils"), (13, "lazypkg.utils.helper")]


def test_a_rule_that_rewrites_the_import_fixes_it(target: Target) -> None:
    after = MODULE.replace(b"from lazypkg.utils import helper, gone", b"from lazypkg.utils import helper, helper")
    site = Site("utils-gone-rename", "pkg/m.py", 13, 13, "lazypkg.utils.gone", Action.EDITED, "", True)
    pending = [FileResult("pkg/m.py", FileStatus.CHANGED, MODULE, after, (site,))]
    packages, _ = audited(target, pending)
    text, _ = render([], "pkg 1.0", "vLLM 0.16.0", verbose=False, packages=packages)
    assert "  pkg/m.py:13: import lazypkg.utils.gone: mismatch (lazypkg.utils has no name 'gone') " \
           "-> fixed by utils-gone-rename" in text.splitlines()
    assert text.splitlines()[-1] == ("0 uses: 0 ok, 0 fixed by the rules, 0 still mismatched, 0 unknown; "
                                     "14 imports of other packages: 3 ok, 1 fixed by the rules, "
                                     "5 still mismatched, 5 unknown")


def test_without_an_answer_every_import_is_unknown_and_says_why() -> None:
    uses = {"pkg/m.py": scan_imports(b"import os\nimport torch\n", "pkg/m.py", {"pkg"})}
    checker = PackageChecker(None, "pkg", "not checked: the checks in the target crashed the interpreter")
    packages = audit_packages(audit_plan([], uses, {}, checker, "0.16"), checker)
    text, _ = render([], "pkg 1.0", "vLLM 0.16.0", verbose=False, packages=packages)
    assert text.splitlines()[1:] == [
        "1 import of other packages, checked in the target",
        "  pkg/m.py:2: import torch: unknown (not checked: the checks in the target crashed the interpreter)",
        "0 uses: 0 ok, 0 fixed by the rules, 0 still mismatched, 0 unknown; "
        "1 import of other packages: 0 ok, 0 fixed by the rules, 0 still mismatched, 1 unknown",
    ]


def test_the_scan_finds_every_absolute_import_of_another_package() -> None:
    source = b'''\
import torch.nn as nn, pkg.sub
from transformers import *
from . import sibling
from .models import Model
from pkg.config import Config
import vllm.config
from contextlib import suppress
with suppress(ImportError):
    import flash_attn


def f():
    from safetensors.torch import load_file, save_file
'''
    uses = scan_imports(source, "pkg/m.py", {"pkg", "vllm"})
    assert [(u.line, u.callee, u.conditional) for u in uses] == [
        (1, "torch.nn", ""),
        (2, "transformers", ""),
        (7, "contextlib.suppress", ""),
        (9, "flash_attn", "under `with suppress(ImportError)` at line 8"),
        (13, "safetensors.torch.load_file", ""),
        (13, "safetensors.torch.save_file", ""),
    ]
    # What the target imports: each module once, the names read from it.
    assert request(uses) == {"contextlib": ["suppress"], "flash_attn": [], "safetensors.torch": ["load_file", "save_file"],
                             "torch.nn": [], "transformers": []}

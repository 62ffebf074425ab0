"""Existence of vLLM names read off a tiny source tree: True, False, or unknown with the reason."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import write_tree

from vllm_shim_patch.analysis.audit import Checker
from vllm_shim_patch.analysis.calls import scan_uses
from vllm_shim_patch.signatures.static.members import Members
from vllm_shim_patch.report.binding import existence_reason
from vllm_shim_patch.signatures.model import Existence, Presence
from vllm_shim_patch.signatures.static import StaticSignatures

TREE = {
    "vllm/__init__.py": b"from .version import __version__\n",
    "vllm/version.py": b"__version__ = '9.9.9'\n",
    "vllm/utils/__init__.py": b"def get_hash_fn_by_name(name):\n    pass\n",
    "vllm/_private.py": b"def get_hash_fn_by_name(name):\n    pass\n",
    "vllm/lazy.py": b"def __getattr__(name):\n    raise AttributeError(name)\n",
    "vllm/pb.py": b"from google.protobuf.internal import builder\nbuilder.Build(DESCRIPTOR, globals())\n",
    "vllm-9.9.9.dist-info/RECORD": b"vllm/__init__.py,,\nvllm/_C.abi3.so,sha256=x,1\n",
    "vllm/request.py": b"""\
import enum
import typing
import torch


class RequestStatus(enum.IntEnum):
    WAITING = enum.auto()
    FINISHED_ABORTED = enum.auto()


class Base:
    def __init__(self, cfg):
        self.cfg = cfg

    def collective_rpc(self, method, *, unique_reply_rank=None):
        pass

    @staticmethod
    def helper(x):
        pass


class Executor(Base):
    field: int

    def execute_model(self, out):
        pass


class Model(torch.nn.Module):
    pass


class Dynamic(Base):
    def __getattr__(self, name):
        return 1


def make() -> Executor:
    return Executor(1)


class SupportsLoRA(typing.Protocol):
    def lora(self): ...


def model() -> SupportsLoRA:
    pass
""",
}


@pytest.fixture
def source(tmp_path: Path) -> StaticSignatures:
    return StaticSignatures(write_tree(tmp_path, TREE))


@pytest.mark.parametrize(("qualname", "on_instance", "answer"), [
    ("vllm.__version__", False, (True, "")),
    ("vllm.utils", False, (True, "")),
    ("vllm.request.RequestStatus.FINISHED_ABORTED", False, (True, "")),
    ("vllm.request.RequestStatus.FINISHED", False, (False, "vllm.request.RequestStatus has no attribute 'FINISHED'")),
    ("vllm.request.RequestStatus.name", True, (True, "")),
    ("vllm.request.Executor.collective_rpc", True, (True, "")),
    ("vllm.request.Executor.cfg", True, (True, "")),
    ("vllm.request.Executor.cfg", False, (False, "vllm.request.Executor has no attribute 'cfg'")),
    ("vllm.request.Executor.field", False, (True, "")),
    ("vllm.request.Executor.__class__", True, (True, "")),
    ("vllm.request.Executor.sample_tokens", True,
     (False, "instance of vllm.request.Executor has no attribute 'sample_tokens'")),
    ("vllm.request.Model.to", True, (None, "base torch.nn.Module of vllm.request.Model is outside vLLM's source")),
    ("vllm.request.Dynamic.anything", True, (None, "vllm.request.Dynamic defines __getattr__")),
    ("vllm.request.make.execute_model", True, (True, "")),
    ("vllm.request.make.nothing", True,
     (False, "instance of vllm.request.Executor has no attribute 'nothing' (nor does any class of this vLLM)")),
    ("vllm.request.make.field", True, (True, "")),
    # What a function returns may be a subclass: a name some class defines is not a sure miss.
    ("vllm.request.make.WAITING", True, (None, "vllm.request.Executor has no attribute 'WAITING', but the object "
                                               "is only annotated as vllm.request.Executor: a subclass may define "
                                               "it (vllm.request does)")),
    ("vllm.request.missing", False, (False, "vllm.request has no name 'missing'")),
    ("vllm.nomodule.name", False, (False, "vllm has no name 'nomodule'")),
    ("vllm._C", False, (True, "")),
    ("vllm.pb.Request", False, (None, "vllm/pb.py passes or writes globals(): its names are made at run time")),
    ("vllm.request.model.lora", True, (True, "")),
    ("vllm.request.model.named_modules", True,
     (None, "vllm.request.SupportsLoRA has no attribute 'named_modules', but it is a Protocol: the object is an "
            "instance of some subclass, which may have it")),
    ("vllm._D", False, (False, "vllm has no name '_D'")),
    # The module's __getattr__ raises for every name: the source decides it does not exist.
    ("vllm.lazy.thing", False, (False, "vllm/lazy.py does not define 'thing' (its __getattr__ raises "
                                       "AttributeError, line 2)")),
])
def test_exists(source: StaticSignatures, qualname: str, on_instance: bool, answer: tuple[object, str]) -> None:
    assert Members(source.names).exists(qualname, on_instance).answer == answer


def test_a_moved_name_is_found_in_public_modules_only(tmp_path: Path) -> None:
    root = write_tree(tmp_path, TREE)
    members = StaticSignatures(root).members
    assert members.relocations("get_hash_fn_by_name") == ["vllm.utils"]
    assert members.relocations("nowhere") == []


PACKAGE = b"""\
from vllm.request import Executor, RequestStatus, Gone
from vllm.utils.hashing import get_hash_fn_by_name
try:
    from vllm.newer import Thing
except ImportError:
    from vllm.request import Base as Thing


class Gen:
    def __init__(self):
        self.ex = Executor(1)

    def run(self):
        self.ex.collective_rpc("m", unique_reply_rank=0)
        self.ex.collective_rpc("m", 0)
        self.ex.helper(1)
        self.ex.sample_tokens(None)
        get_hash_fn_by_name("sha256")
        return RequestStatus.FINISHED_ABORTED

    def declared(self, ex: Executor):
        ex.WAITING
        ex.not_anywhere
        if hasattr(ex, "sample_tokens"):
            self.ex.sample_tokens(None)
"""


def test_the_checker_binds_methods_without_self_and_says_where_a_name_went(source: StaticSignatures) -> None:
    uses = scan_uses(PACKAGE, "pkg/gen.py")
    sigs = source.get_many(sorted({u.callee for u in uses if u.is_call}))
    checker = Checker(sigs, "", Members(source.names), source)
    from vllm_shim_patch.analysis.audit import _check_file

    got = [(b.call.line, b.call.kind, b.call.callee.rpartition(".")[2], str(b.status), b.reason)
           for b in _check_file(uses, checker)]
    assert got == [
        (1, "import", "Executor", "ok", ""),
        (1, "import", "RequestStatus", "ok", ""),
        (1, "import", "Gone", "mismatch",
         "vllm.request has no name 'Gone'; no public module of this vLLM defines Gone"),
        (2, "import", "get_hash_fn_by_name", "mismatch",
         "no module vllm.utils.hashing; get_hash_fn_by_name is in vllm.utils now"),
        (4, "import", "Thing", "unknown",
         "no module vllm.newer; no public module of this vLLM defines Thing; "
         "in the try/except ImportError at line 3"),
        (6, "import", "Base", "ok", ""),
        (11, "call", "Executor", "ok", ""),
        (14, "method", "collective_rpc", "ok", ""),
        (15, "method", "collective_rpc", "mismatch", "too many positional arguments (2 given, 1 accepted)"),
        (16, "method", "helper", "unknown",
         "cannot tell whether vllm.request.Executor.helper takes self (its first parameter is not named self)"),
        (17, "method", "sample_tokens", "mismatch", "instance of vllm.request.Executor has no attribute 'sample_tokens'"),
        (18, "call", "get_hash_fn_by_name", "unknown", "not bound: vllm.utils has no name 'hashing' (see the import)"),
        (19, "attribute", "FINISHED_ABORTED", "ok", ""),
        (22, "attribute", "WAITING", "unknown",
         "vllm.request.Executor has no attribute 'WAITING', but the object is only annotated as "
         "vllm.request.Executor: a subclass may define it (vllm.request does)"),
        (23, "attribute", "not_anywhere", "mismatch",
         "instance of vllm.request.Executor has no attribute 'not_anywhere' (nor does any class of this vLLM)"),
        (25, "method", "sample_tokens", "unknown",
         "instance of vllm.request.Executor has no attribute 'sample_tokens'; "
         "under `if hasattr(ex, 'sample_tokens')` at line 24"),
    ]


@pytest.mark.parametrize(("qualname", "whole", "kind", "reason", "moved_to"), [
    pytest.param("vllm.request.Executor", False, Presence.PRESENT, "", (), id="present"),
    pytest.param("vllm.request.Gone", False, Presence.MISSING, "vllm.request has no name 'Gone'", (),
                 id="missing"),
    pytest.param("vllm.utils.hashing.get_hash_fn_by_name", False, Presence.MOVED, "no module vllm.utils.hashing",
                 ("vllm.utils",), id="moved"),
    # Where it is asked for is not where it went: vllm.utils itself defines it.
    pytest.param("vllm.utils.get_hash_fn_by_name", False, Presence.PRESENT, "", (), id="present-where-asked"),
    pytest.param("vllm.pb.Request", False, Presence.UNKNOWN,
                 "vllm/pb.py passes or writes globals(): its names are made at run time", (), id="unknown"),
    pytest.param("vllm.request", True, Presence.PRESENT, "", (), id="module"),
    pytest.param("vllm.nomodule", True, Presence.MISSING, "no module vllm.nomodule", (), id="no-module"),
])
def test_the_import_check_answers_with_a_type(source: StaticSignatures, qualname: str, whole: bool,
                                             kind: Presence, reason: str, moved_to: tuple[str, ...]) -> None:
    found = source.members.imported(qualname, whole_module=whole)
    assert found == Existence(kind, qualname, reason, moved_to)
    assert found.found is {Presence.PRESENT: True, Presence.UNKNOWN: None}.get(kind, False)
    assert found.answer == (found.found, reason)
    assert found.module == qualname.rpartition(".")[0]


def test_an_import_from_a_module_that_may_be_compiled_is_unknown(tmp_path: Path) -> None:
    # No compiled file and no RECORD to list one (a git checkout): vllm._E may be an extension.
    members = StaticSignatures(write_tree(tmp_path, {"vllm/__init__.py": b""})).members
    assert members.imported("vllm._E.thing") == Existence(
        Presence.UNKNOWN, "vllm._E.thing",
        "no source for module vllm._E, and this vLLM source holds no compiled modules to look in")


def test_what_the_audit_says_of_an_existence_is_rendered_in_report() -> None:
    moved = Existence(Presence.MOVED, "vllm.a.f", "vllm.a has no name 'f'", ("vllm.b", "vllm.c"))
    assert existence_reason(moved, imported=True) == "vllm.a has no name 'f'; f is in vllm.b, vllm.c now"
    assert existence_reason(moved) == "vllm.a has no name 'f'"  # not an import: where is not asked
    gone = Existence(Presence.MISSING, "vllm.a.f", "vllm.a has no name 'f'")
    assert existence_reason(gone, imported=True) == "vllm.a has no name 'f'; no public module of this vLLM defines f"
    unknown = Existence(Presence.UNKNOWN, "vllm.a.f", "cannot tell")
    assert existence_reason(unknown, imported=True) == "cannot tell"


MRO_TREE = {
    "vllm/__init__.py": b"",
    "vllm/m.py": b"""\
import torch


class Near:
    pass


class Far:
    pass


class A:
    cfg: Far


class X(A):
    cfg: Near


class B(A):
    pass


class C(X):
    pass


class D(B, C):
    def run(self):
        pass


class Layer(torch.nn.Module):
    def forward(self, x):
        pass


class Odd(Unknown):
    pass
""",
}


def test_the_mro_is_c3(tmp_path: Path) -> None:
    # D(B, C), B(A), C(X), X(A): C3 reads X before A, so D's `cfg` is X's Near (a walk of the
    # bases breadth first would reach A's Far first).
    members = StaticSignatures(write_tree(tmp_path, MRO_TREE)).members
    d = members.names.lookup("vllm.m.D")
    assert [e.label if not isinstance(e, str) else e for e in members.names.attribute_mro(d)] == [
        "vllm.m.D", "vllm.m.B", "vllm.m.C", "vllm.m.X", "vllm.m.A", "builtins.object"]
    cls, why = members.instance_class("vllm.m.D.cfg")
    assert (cls.label, why) == ("vllm.m.Near", "")


@pytest.mark.parametrize(("qualname", "expected"), [
    ("vllm.m.D.run", True),
    ("vllm.m.D.cfg", False),  # a field is no method a guard asks about
    ("vllm.m.D.gone", False),
    ("vllm.m.Layer.forward", True),
    ("vllm.m.Layer.sample_tokens", False),  # torch's Module defines none of vLLM's names
    ("vllm.m.Odd.anything", None),  # a base the source does not resolve
    ("vllm.m.nothing.x", None),
])
def test_the_guards_ask_the_same_engine(tmp_path: Path, qualname: str, expected: bool | None) -> None:
    source = StaticSignatures(write_tree(tmp_path, MRO_TREE))
    assert source.members.defines(qualname) is expected
    assert source.defines(qualname) is expected

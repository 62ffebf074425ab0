"""Callee names from the imports (rewrite/names.py): libcst's answer, or none at all.

Wherever `import_names` answers, its names for every call of a rule's package are exactly what
libcst's `QualifiedNameProvider` gives (the engine then decides alike); where one scope analysis
could tell otherwise it declines (None) and the engine asks the provider.
"""

from __future__ import annotations

import sys
import textwrap
import zipfile
from pathlib import Path

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, QualifiedNameProvider, QualifiedNameSource

from vllm_shim_patch.rewrite.names import import_names

PACKAGES = frozenset({"vllm"})


class _Calls(cst.CSTVisitor):
    def __init__(self) -> None:
        super().__init__()
        self.funcs: list[cst.BaseExpression] = []

    def visit_Call(self, node: cst.Call) -> None:
        self.funcs.append(node.func)


def _provider(module: cst.Module) -> dict[cst.BaseExpression, set]:
    found = MetadataWrapper(module, unsafe_skip_copy=True).resolve(QualifiedNameProvider)
    calls = _Calls()
    module.visit(calls)
    out = {}
    for func in calls.funcs:
        value = found.get(func, set())
        out[func] = set(value() if callable(value) else value)
    return out


def _disagreements(source: str, packages: frozenset[str] = PACKAGES) -> list[str] | None:
    """None where import_names declines; else each call whose answer differs from libcst's."""
    data = textwrap.dedent(source).encode()
    fast = import_names(data, packages)
    if fast is None:
        return None
    module = cst.parse_module(data)
    bad = []
    for func, expected in _provider(module).items():
        got = set(fast(func))
        ours_to_decide = {q for q in expected
                          if q.source is QualifiedNameSource.IMPORT and q.name.split(".")[0] in packages}
        if got != expected and (got or ours_to_decide):
            bad.append(f"{module.code_for_node(func)}: {got} != {expected}")
    return bad


ANSWERED = {
    "from-import": """
        from vllm.v1.request import Request, RequestStatus
        def f():
            Request(a=1)
            RequestStatus.FINISHED.x()
    """,
    "dotted import": """
        import vllm.v1.request
        def f():
            vllm.v1.request.Request(1)
            vllm.v1()
    """,
    "import as": """
        import vllm.v1.request as r
        r.Request(1)
    """,
    "module imported from its package": """
        from vllm.v1 import request
        class C:
            x = request.Request()
            def m(self):
                return request.Request(eos=1)
    """,
    "alias": """
        from vllm.v1.request import Request as R
        def f():
            R(1)
            Request(2)
    """,
    "call of a call, subscript, method": """
        from vllm.v1.request import Request
        def f():
            Request()()
            Request[int](1)
            Request.make(1)
            (Request)(1)
    """,
    "after the import at module level": """
        import os
        from vllm.config import CacheConfig
        cfg = CacheConfig(block_size=16)
        [CacheConfig() for _ in range(2)]
    """,
    "top-level package": """
        import vllm
        def f():
            vllm.config.CacheConfig()
    """,
    "relative and other packages": """
        from .request import Request
        import torch
        def f():
            Request(1)
            torch.zeros(1)
    """,
    "names bound twice that no rule's package imports": """
        from vllm.v1.request import Request
        import torch
        def f(x, torch=torch):
            torch.zeros(1)
            x = len(x)
            return Request(x)
    """,
    "lambda, decorator and default after the import": """
        from vllm.config import CacheConfig
        g = lambda: CacheConfig()
        @CacheConfig.wrap()
        def h(c=CacheConfig()):
            pass
    """,
    "several names in one statement": """
        from vllm.config import (
            CacheConfig,
            CacheConfigX as CC,
        )
        def f():
            CacheConfig()
            CC()
            CacheConfigX()
    """,
}

DECLINED = {
    "call at module level before the import": """
        x = Request(1)
        from vllm.v1.request import Request
    """,
    "decorator before the import": """
        @CacheConfig.wrap()
        def h():
            pass
        from vllm.config import CacheConfig
    """,
    "try/except import": """
        try:
            from vllm.v1.request import Request
        except ImportError:
            Request = None
        def f():
            Request(1)
    """,
    "import inside a function": """
        def f():
            from vllm.v1.request import Request
            Request(1)
    """,
    "rebound at module level": """
        from vllm.v1.request import Request
        Request = other
        def f():
            Request(1)
    """,
    "a parameter of the same name": """
        from vllm.v1.request import Request
        def f(Request):
            Request(1)
    """,
    "a method of the same name": """
        from vllm.v1.request import Request
        class C:
            def Request(self):
                pass
            x = Request()
    """,
    "star import": """
        from vllm.v1.request import Request
        from vllm.other import *
        Request(1)
    """,
    "two dotted imports": """
        import vllm.config
        import vllm.v1.request
        vllm.config.CacheConfig()
    """,
    "global": """
        from vllm.v1.request import Request
        def f():
            global Request
            Request(1)
    """,
    "del": """
        from vllm.v1.request import Request
        Request(1)
        del Request
    """,
    "for target": """
        from vllm.v1.request import Request
        for Request in []:
            Request()
    """,
    "with target": """
        from vllm.v1.request import Request
        with x as Request:
            Request()
    """,
    "except target": """
        from vllm.v1.request import Request
        try:
            pass
        except E as Request:
            Request()
    """,
    "walrus in a comprehension": """
        from vllm.v1.request import Request
        y = [(Request := 1) for _ in z]
        Request()
    """,
    "match capture": """
        from vllm.v1.request import Request
        match x:
            case [*Request]:
                pass
        Request()
    """,
    "a string annotation libcst would read as a binding": """
        from vllm.v1.request import Request
        def f(x: "(Request := 1)"):
            Request()
    """,
    "not Python this interpreter reads": """
        from vllm.v1.request import Request
        print "x"
        Request()
    """,
}


@pytest.mark.parametrize("source", ANSWERED.values(), ids=ANSWERED.keys())
def test_answers_as_libcst_does(source: str) -> None:
    assert _disagreements(source) == []


@pytest.mark.parametrize("source", DECLINED.values(), ids=DECLINED.keys())
def test_declines_where_a_scope_decides(source: str) -> None:
    assert _disagreements(source) is None


def test_every_package_of_interest_is_checked() -> None:
    source = """
        import os
        import os.path
        from vllm.v1.request import Request
        def f():
            os.path.join("a")
            Request()
    """
    assert _disagreements(source) == []  # `os` is bound twice, but no rule is for os
    assert _disagreements(source, frozenset({"vllm", "os"})) is None


@pytest.mark.slow  # the real wheels
@pytest.mark.parametrize("version", ["0.3.0", "0.4.0", "0.4.0.1"])
def test_real_speculators_modules_answered_alike(version: str) -> None:
    """speculators' modules that call vLLM; 0.3.0's generator (the dry run's hot file) is answered."""
    sys.path.insert(0, str(Path(__file__).parents[1]))
    try:
        import realdata
    finally:
        sys.path.pop(0)
    with zipfile.ZipFile(realdata.speculators_wheel(version)) as zf:
        names = [n for n in zf.namelist() if n.startswith("speculators/data_generation/") and n.endswith(".py")]
        sources = {n: zf.read(n) for n in names}
    answered = []
    for name, data in sorted(sources.items()):
        result = _disagreements(data.decode())
        assert result in (None, []), (name, result)
        if result is not None:
            answered.append(name.rsplit("/", 1)[1])
    assert {"vllm_hidden_states_generator.py", "custom_worker.py"} <= set(answered)


def test_case_sources_answered_alike() -> None:
    """Every before/after and unchanged source of the engine's cases: answered alike or declined."""
    from vllm_shim_patch.rules.loader import load_pack

    pack = load_pack(sorted((Path(__file__).parent / "cases").glob("*.yaml")), bundled=False)
    checked = 0
    for rule in pack.rules:
        packages = frozenset(c.split(".")[0] for c in rule.calls)
        for source in [*(e.before for e in rule.examples), *rule.unchanged]:
            result = _disagreements(source, packages or PACKAGES)
            assert result in (None, []), result
            checked += result is not None
    assert checked > 20

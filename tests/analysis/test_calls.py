"""The scan of a package module for its uses of vLLM: what is typed, and what is not."""

from __future__ import annotations

import pytest

from vllm_shim_patch.analysis.calls import Unscanned, scan, scan_uses

SOURCE = b'''\
from typing import Optional
import vllm.config as vc
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.request import RequestStatus
from . import sibling


class Gen:
    engine: "Scheduler"

    def __init__(self, cfg):
        self.sched = None
        self.sched = Scheduler(cfg)
        self.other = Scheduler(cfg)
        self.other = make()
        self.cfg = self._config()

    def _config(self) -> vc.VllmConfig:
        return vc.VllmConfig()

    def run(self, s: Optional[Scheduler], t: "Scheduler | None", u):
        self.sched.add_request(1, *u)
        self.other.add_request(2)
        self.engine.schedule()
        self.cfg.cache_config.block_size = 4
        s.finish_requests([1], RequestStatus.FINISHED_ABORTED)
        t.schedule()
        u.schedule()
        local = Scheduler(u)
        local.has_requests()
        maybe = Scheduler(u)
        maybe = u
        maybe.schedule()
        lambda s: s.schedule()

    @staticmethod
    def free(self):
        self.schedule()


def outside(x: Scheduler):
    import vllm
    x.update_from_output(vllm.__version__, key=1, **{})
'''


def uses() -> list[tuple[int, str, str, bool]]:
    return [(u.line, u.kind, u.callee, u.on_instance) for u in scan_uses(SOURCE, "pkg/mod.py")]


def test_every_use_whose_vllm_type_the_source_shows() -> None:
    assert uses() == [
        (2, "import", "vllm.config", False),
        (3, "import", "vllm.v1.core.sched.scheduler.Scheduler", False),
        (4, "import", "vllm.v1.request.RequestStatus", False),
        (13, "call", "vllm.v1.core.sched.scheduler.Scheduler", False),
        (14, "call", "vllm.v1.core.sched.scheduler.Scheduler", False),
        (18, "attribute", "vllm.config.VllmConfig", False),
        (19, "call", "vllm.config.VllmConfig", False),
        (22, "method", "vllm.v1.core.sched.scheduler.Scheduler.add_request", True),
        (24, "method", "vllm.v1.core.sched.scheduler.Scheduler.schedule", True),
        (25, "attribute", "vllm.config.VllmConfig.cache_config", True),
        (26, "method", "vllm.v1.core.sched.scheduler.Scheduler.finish_requests", True),
        (26, "attribute", "vllm.v1.request.RequestStatus.FINISHED_ABORTED", False),
        (27, "method", "vllm.v1.core.sched.scheduler.Scheduler.schedule", True),
        (29, "call", "vllm.v1.core.sched.scheduler.Scheduler", False),
        (30, "method", "vllm.v1.core.sched.scheduler.Scheduler.has_requests", True),
        (31, "call", "vllm.v1.core.sched.scheduler.Scheduler", False),
        (42, "import", "vllm", False),
        (43, "method", "vllm.v1.core.sched.scheduler.Scheduler.update_from_output", True),
        (43, "attribute", "vllm.__version__", False),
    ]


def test_a_call_keeps_the_shape_binding_needs() -> None:
    first = [u for u in scan_uses(SOURCE, "pkg/mod.py") if u.line in (22, 43) and u.kind == "method"]
    assert [(u.n_positional, u.keywords, u.star_args, u.star_kwargs, u.code) for u in first] == [
        (1, (), True, False, "self.sched.add_request(1, *u)"),
        (1, ("key",), False, True, "x.update_from_output(vllm.__version__, key=1, **{})"),
    ]


def test_scan_keeps_only_calls_of_imported_names() -> None:
    assert [(c.line, c.callee) for c in scan(SOURCE, "pkg/mod.py")] == [
        (13, "vllm.v1.core.sched.scheduler.Scheduler"),
        (14, "vllm.v1.core.sched.scheduler.Scheduler"),
        (19, "vllm.config.VllmConfig"),
        (29, "vllm.v1.core.sched.scheduler.Scheduler"),
        (31, "vllm.v1.core.sched.scheduler.Scheduler"),
    ]


def test_relative_imports_and_other_packages_are_not_vllm() -> None:
    src = b"from .vllm import x\nfrom vllm_ext import y\nx.a()\ny.b()\nimport vllmish\nvllmish.c()\n"
    assert scan_uses(src, "pkg/mod.py") == []


def test_a_file_that_does_not_parse_is_unscanned_not_empty() -> None:
    # Issue 20: "no uses" for a file it could not read made the audit vouch for it.
    with pytest.raises(Unscanned) as info:
        scan_uses(b"import vllm\ndef broken(:\n", "pkg/bad.py")
    assert (info.value.path, info.value.reason) == ("pkg/bad.py", "syntax error at line 2: invalid syntax")
    assert scan_uses(b"def broken(:\n", "pkg/bad.py") == []  # no mention of vLLM: nothing to read


def test_a_name_two_imports_bind_differently_is_not_typed_and_feature_tests_are_marked() -> None:
    src = b'''\
import sys
if sys.platform == "linux":
    from vllm import _custom_ops as ops
else:
    from vllm._xpu_ops import xpu_ops as ops
try:
    from vllm.new import Thing
except (ValueError, ImportError):
    Thing = None
if vllm_version >= (0, 12):
    import vllm.x
ops.reshape_and_cache(1)
'''
    got = [(u.line, u.kind, u.callee, u.conditional) for u in scan_uses(src, "pkg/m.py")]
    assert got == [
        (3, "import", "vllm._custom_ops", ""),
        (5, "import", "vllm._xpu_ops.xpu_ops", ""),
        (7, "import", "vllm.new.Thing", "in the try/except ImportError at line 6"),
        (11, "import", "vllm.x", "under `if vllm_version >= (0, 12)` at line 10"),
    ]


def test_the_walk_is_ast_walk_in_its_order() -> None:
    import ast
    from pathlib import Path

    from vllm_shim_patch.analysis import calls

    tree = ast.parse(Path(calls.__file__).read_bytes())
    assert [id(n) for n in calls._walk(tree)] == [id(n) for n in ast.walk(tree)]
    assert all(calls._children(n) == list(ast.iter_child_nodes(n)) for n in ast.walk(tree))


# Issue 20: the scanner reads a file as Python does, and says when it cannot.
_CALL = "from vllm.v1.request import Request\nRequest(eos_token_id=1)\n"


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"\xef\xbb\xbf" + _CALL.encode(), id="utf8-bom"),
        pytest.param(b"# -*- coding: latin-1 -*-\n# caf\xe9\n" + _CALL.encode(), id="latin-1-cookie"),
        pytest.param(_CALL.replace("\n", "\r\n").encode(), id="crlf"),
    ],
)
def test_a_file_python_reads_is_scanned_alike(data: bytes) -> None:
    uses = [(u.kind, u.callee, u.keywords) for u in scan_uses(data, "pkg/m.py")]
    assert ("call", "vllm.v1.request.Request", ("eos_token_id",)) in uses


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        pytest.param(b"import vllm\nx = 'caf\xe9'\n", "cannot decode ('utf-8' codec can't decode byte 0xe9 in "
                     "position 20: invalid continuation byte)", id="not-utf8"),
        pytest.param(b"# coding: klingon\nimport vllm\n", "cannot decode (unknown encoding: klingon)", id="unknown-cookie"),
        pytest.param(b"import vllm\nx = " + b"+".join([b"a"] * 2400) + b"\n",
                     "nested too deeply for the scanner (a generated expression?)", id="2400-terms"),
        pytest.param(b"import vllm\nx = " + b"(" * 300 + b"1" + b")" * 300 + b"\n",
                     "syntax error at line 2: too many nested parentheses", id="300-parentheses"),
    ],
)
def test_a_file_the_scanner_cannot_read_is_unscanned(data: bytes, reason: str) -> None:
    with pytest.raises(Unscanned) as info:
        scan_uses(data, "pkg/m.py")
    assert info.value.reason == reason


EXTENSION = b'''\
import torch
from vllm.distributed import get_tp_group


class Extension:
    def setup(self):
        model = self.model_runner.model
        self.model_runner.load_lora(1)
        order = self.model_runner.input_batch.req_ids
        self._mine = get_tp_group()
        self._mine.rank_in_group


class Other:
    def setup(self):
        return self.model_runner.input_batch


class SetsItsOwn:
    def __init__(self, runner):
        self.model_runner = runner

    def setup(self):
        return self.model_runner.input_batch
'''

GENERATOR_SOURCE = b'''\
from vllm.config import ParallelConfig
ParallelConfig(worker_extension_cls="pkg.worker.Extension", tensor_parallel_size=2)
ParallelConfig(worker_extension_cls=name)
'''


def test_a_worker_extensions_runner_reads_are_uses_of_the_workers_runner() -> None:
    """Named by a worker_extension_cls string anywhere in the package; one level deep; a class
    that is no extension, or that sets self.model_runner itself, is not read so."""
    from vllm_shim_patch.analysis.calls import worker_extensions

    extensions = worker_extensions([GENERATOR_SOURCE, EXTENSION, b"worker_extension_cls = (\n"])
    assert extensions == frozenset({"pkg.worker.Extension"})
    uses = scan_uses(EXTENSION, "pkg/worker.py", extensions=extensions)
    runner = "vllm.v1.worker.gpu_worker.Worker.model_runner"
    assert [(u.line, u.kind, u.callee, u.on_instance, u.declared) for u in uses if "model_runner" in u.callee] == [
        (7, "attribute", f"{runner}.model", True, False),
        (8, "method", f"{runner}.load_lora", True, False),
        (9, "attribute", f"{runner}.input_batch", True, False),
    ]
    assert [u.callee for u in scan_uses(EXTENSION, "pkg/worker.py") if "model_runner" in u.callee] == []

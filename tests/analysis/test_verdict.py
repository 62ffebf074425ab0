"""What verification binds and what it calls passed, partial or failed (a tiny package, the
tool's own interpreter as the target; the real speculators runs are in test_verify.py)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import write_tree
from packaging.version import Version

from vllm_shim_patch.analysis.calls import CallRecord, scan
from vllm_shim_patch.analysis.verify import plan_calls, run_checks
from vllm_shim_patch.rewrite.results import FileResult, Site
from vllm_shim_patch.rewrite.plan import Plan
from vllm_shim_patch.kinds import Action, FileStatus, SignatureKind
from vllm_shim_patch.signatures.model import POS_OR_KW, Param, Signature
from vllm_shim_patch.target import Target

SCHED = "vllm.v1.core.sched.scheduler.Scheduler"
SCHED_SIG = Signature(SCHED, (Param("vllm_config", POS_OR_KW, True), Param("block_size", POS_OR_KW, True)), "t")


@pytest.fixture
def target(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Target:
    write_tree(tmp_path / "lib", {
        "pkgv/__init__.py": b"",
        "pkgv/fine.py": b"X = 1\n",
        "pkgv/needs_dep.py": b"import vsp_absent_dependency\n",
        "pkgv/broken.py": b"raise RuntimeError('boom at import')\n",
        # As pydantic raises PydanticUndefinedAnnotation: the message, a blank line, a help URL;
        # raised inside vLLM, called from the package.
        "pkgv/annotated.py": b"from vllm.config import build\n\nbuild()\n",
        "vllm/__init__.py": b"",
        "vllm/config.py": (b"class PydanticUndefinedAnnotation(NameError):\n    pass\n\n\n"
                           b"def build():\n    raise PydanticUndefinedAnnotation(\"name 'torch' is not defined\\n\\n\"\n"
                           b"        \"For further information visit https://errors.pydantic.dev/2.11/u/undefined-annotation\")\n"),
        # As pydantic's ValidationError: every line but the help pointer says what is wrong.
        "pkgv/validated.py": (b"class ValidationError(ValueError):\n    pass\n\n\n"
                              b"raise ValidationError('1 validation error for SchedulerConfig\\nis_encoder_decoder\\n'\n"
                              b"                      '  Field required [type=missing, input_value={}, input_type=dict]\\n'\n"
                              b"                      '    For further information visit https://errors.pydantic.dev/2.11/v/missing')\n"),
    })
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "lib"))
    return Target(sys.executable, "3", "pkgv", "1.0", tmp_path / "lib", (), None, None, None)


def call(keywords: tuple[str, ...], line: int = 5, callee: str = SCHED) -> CallRecord:
    return CallRecord("pkgv/fine.py", line, callee, 0, keywords, False, False, "Scheduler(...)", line)


def static(sigs: dict[str, Any]) -> Any:
    return lambda callees, probe: ({c: sigs.get(c) for c in callees}, SignatureKind.STATIC, "")


def test_everything_checked_passes(target: Target) -> None:
    r = run_checks(target, static({SCHED: SCHED_SIG}), ["pkgv.fine"], [call(("vllm_config", "block_size"))])
    assert (r.ok, r.verdict, r.summary, r.not_checked) == (True, "passed", "passed: 1 import ok, 1 call binds (static)", [])
    assert r.data["verdict"] == "passed"


def test_an_import_whose_dependency_is_missing_makes_it_partial(target: Target) -> None:
    r = run_checks(target, static({SCHED: SCHED_SIG}), ["pkgv.fine", "pkgv.needs_dep"],
                   [call(("vllm_config", "block_size"))])
    assert (r.ok, r.verdict) == (True, "partial")
    assert r.summary == ("partial: 1 import ok, 1 call binds (static); "
                         "not checked: 1 import (vsp_absent_dependency missing in the target)")
    assert r.data["not_checked"] == ["1 import (vsp_absent_dependency missing in the target)"]


def test_calls_without_signatures_make_it_partial(target: Target) -> None:
    r = run_checks(target, static({}), [], [call(("vllm_config",)), call(("x",), 9)])
    assert (r.ok, r.verdict, r.summary) == (True, "partial", "partial: not checked: 2 calls (signature unknown)")
    none = run_checks(target, lambda c, probe: (dict.fromkeys(c), None, "no vLLM: binding not checked"), [], [call(())])
    assert none.summary == "partial: not checked: 1 call (no vLLM signatures)"
    assert none.lines == ["note: no vLLM: binding not checked",
                          f"pkgv/fine.py:5: {SCHED}: unknown (no vLLM: binding not checked)"]


def test_a_call_that_does_not_bind_fails_even_beside_what_could_not_run(target: Target) -> None:
    r = run_checks(target, static({SCHED: SCHED_SIG}), ["pkgv.needs_dep"], [call(("vllm_config",))],
                   {("pkgv/fine.py", 5): "scheduler-add-block-size was declined in review"})
    assert (r.ok, r.verdict) == (False, "failed")
    assert r.reason == (f"1 call does not bind: pkgv/fine.py:5: {SCHED}: mismatch (missing required argument "
                        "'block_size'); scheduler-add-block-size was declined in review")
    assert r.notable == [
        "import pkgv.needs_dep: not tested, vsp_absent_dependency is not installed in the target",
        f"pkgv/fine.py:5: {SCHED}: mismatch (missing required argument 'block_size'); "
        "scheduler-add-block-size was declined in review",
    ]


def test_an_import_that_raises_fails(target: Target) -> None:
    r = run_checks(target, static({}), ["pkgv.broken"], [])
    assert (r.ok, r.verdict, r.reason) == (False, "failed", "import pkgv.broken failed: RuntimeError: boom at import "
                                                            "(raised at pkgv/broken.py:1)")


def test_a_failed_import_names_the_message_and_where_vllm_raised_it_not_the_help_url(target: Target) -> None:
    r = run_checks(target, static({}), ["pkgv.annotated"], [])
    assert (r.ok, r.verdict) == (False, "failed")
    assert r.reason == ("import pkgv.annotated failed: PydanticUndefinedAnnotation: name 'torch' is not defined "
                        "(raised at vllm/config.py:6)")
    assert r.data["imports"][0]["exception"] == {"type": "PydanticUndefinedAnnotation",
                                                 "message": "name 'torch' is not defined", "at": "vllm/config.py:6"}
    # The traceback is still shown in full with the import's line.
    assert r.lines[0].startswith("import pkgv.annotated: FAILED\nTraceback (most recent call last):")
    assert r.lines[0].endswith("For further information visit https://errors.pydantic.dev/2.11/u/undefined-annotation")


def test_a_multiline_message_keeps_every_line_that_says_what_is_wrong(target: Target) -> None:
    r = run_checks(target, static({}), ["pkgv.validated"], [])
    assert r.reason == ("import pkgv.validated failed: ValidationError: 1 validation error for SchedulerConfig | "
                        "is_encoder_decoder | Field required [type=missing, input_value={}, input_type=dict] "
                        "(raised at pkgv/validated.py:5)")


def test_nothing_to_check_passes_without_asking_for_signatures(target: Target) -> None:
    def never(callees: set[str]) -> Any:
        raise AssertionError("no call to bind, no signatures to read")

    assert run_checks(target, never, [], []).summary == "passed: nothing to check"


REWRITTEN_BEFORE = b"""\
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.config import CacheConfig
c = CacheConfig(a=1, old=2)
s = Scheduler(vllm_config=c)
"""
REWRITTEN_AFTER = REWRITTEN_BEFORE.replace(b", old=2", b"")
UNTOUCHED = b"""\
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.config import CacheConfig
c = CacheConfig(a=1)
s = Scheduler(
    vllm_config=c,
)
"""


def site(path: str, line: int, end: int, action: Action, rule: str = "scheduler-add-block-size") -> Site:
    return Site(rule, path, line, end, SCHED, action, "", True)


@pytest.mark.parametrize(("action", "note"), [
    (Action.DECLINED, "scheduler-add-block-size was declined in review"),
    (Action.NEEDS_HUMAN, "scheduler-add-block-size was left for a human"),
    (Action.NOTICE, "scheduler-add-block-size raised a notice"),
    (Action.NOT_NEEDED, None),
])
def test_apply_binds_the_rewritten_files_whole_and_the_sites_left_elsewhere(action: Action, note: str | None) -> None:
    results = (
        FileResult("pkgv/a.py", FileStatus.CHANGED, REWRITTEN_BEFORE, REWRITTEN_AFTER,
                   (site("pkgv/a.py", 3, 3, Action.EDITED, "drop-old"),)),
        FileResult("pkgv/b.py", FileStatus.UNCHANGED, UNTOUCHED, UNTOUCHED, (site("pkgv/b.py", 4, 6, action),)),
        FileResult("pkgv/c.py", FileStatus.UNCHANGED, UNTOUCHED, UNTOUCHED),
    )
    plan = Plan(None, Version("0.16"), None, None, (), results)  # type: ignore[arg-type]
    calls, sites = plan_calls(plan)
    # a.py was rewritten: its untouched Scheduler(...) call is bound too. b.py is as installed: only
    # the call inside the site's lines; c.py, which no rule matched, not at all.
    assert [(c.path, c.line, c.callee.rsplit(".", 1)[1]) for c in calls] == [
        ("pkgv/a.py", 3, "CacheConfig"), ("pkgv/a.py", 4, "Scheduler"), ("pkgv/b.py", 4, "Scheduler")]
    assert sites == ({} if note is None else {("pkgv/b.py", 4): note})


def test_a_site_in_a_rewritten_file_is_found_through_the_lines_the_rewrite_moved() -> None:
    before = b"from vllm.config import CacheConfig\nfrom vllm.v1.core.sched.scheduler import Scheduler\n" \
             b"c = CacheConfig(\n    a=1,\n    old=2,\n)\ns = Scheduler(vllm_config=c)\n"
    after = before.replace(b"    old=2,\n", b"")
    results = (FileResult("pkgv/a.py", FileStatus.CHANGED, before, after,
                          (site("pkgv/a.py", 3, 6, Action.EDITED, "drop-old"),
                           site("pkgv/a.py", 7, 7, Action.DECLINED))),)
    calls, sites = plan_calls(Plan(None, Version("0.16"), None, None, (), results))  # type: ignore[arg-type]
    assert [(c.line, c.end_line) for c in calls] == [(3, 5), (6, 6)]
    assert sites == {("pkgv/a.py", 6): "scheduler-add-block-size was declined in review"}
    assert scan(after, "pkgv/a.py")[1].line == 6


def test_a_site_names_its_own_call_not_the_calls_in_its_arguments() -> None:
    source = (b"from vllm.config import VllmConfig\nfrom vllm.v1.core.sched.scheduler import Scheduler\n"
              b"s = Scheduler(\n    vllm_config=VllmConfig(),\n)\n")
    results = (FileResult("pkgv/b.py", FileStatus.UNCHANGED, source, source, (site("pkgv/b.py", 3, 5, Action.DECLINED),)),)
    calls, sites = plan_calls(Plan(None, Version("0.16"), None, None, (), results))  # type: ignore[arg-type]
    assert [(c.line, c.callee.rsplit(".", 1)[1]) for c in calls] == [(3, "Scheduler"), (4, "VllmConfig")]
    assert sites == {("pkgv/b.py", 3): "scheduler-add-block-size was declined in review"}

"""`-i` shows every hunk that is written: a decline that makes another rule's edit needed (the
capture hooks declined, the edit of speculators' own forward is needed again) is reviewed in a
round of its own, and nothing a round did not show is written."""

from __future__ import annotations

import sys
from pathlib import Path

from packaging.version import Version

from vllm_shim_patch.commands.patch import _reviewed_plan
from vllm_shim_patch.report.diff import Hunk
from vllm_shim_patch.rewrite.plan import Plan
from vllm_shim_patch.rewrite.results import FileResult, Site
from vllm_shim_patch.kinds import Action, FileStatus
from vllm_shim_patch.target import Target

TARGET = Target(python=sys.executable, python_version="3.11.7", package="speculators", version="0.3.0",
                location=Path("/site"), record=(), editable=None, vllm_version=None, vllm_location=None)
BEFORE = b"a = 1\nb = 2\nc = 3\nd = 4\ne = 5\nf = 6\ng = 7\nh = 8\ni = 9\n"


def _site(rule: str, line: int) -> Site:
    return Site(rule, "m.py", line, line, "m", Action.EDITED, "x", False)


def _plan(*edits: tuple[str, int]) -> Plan:
    lines = BEFORE.splitlines(keepends=True)
    for _, line in edits:
        lines[line - 1] = lines[line - 1].replace(b"= ", b"= -")
    result = FileResult("m.py", FileStatus.CHANGED, BEFORE, b"".join(lines), tuple(_site(r, n) for r, n in edits))
    return Plan(TARGET, Version("0.16"), None, None, (), (result,))


class _Context:
    """Plans as the rules would: `hooks` at line 1 unbinds the code `embed` (line 9) would edit."""

    def __init__(self) -> None:
        self.logged: list[str] = []
        self.asked: list[frozenset[tuple[str, int, str]]] = []

    def plan(self, files: dict[str, bytes], declined: frozenset[tuple[str, int, str]] = frozenset()) -> Plan:
        self.asked.append(declined)
        edits = [] if ("m.py", 1, "hooks") in declined else [("hooks", 1)]
        if ("m.py", 1, "hooks") in declined and ("m.py", 9, "embed") not in declined:
            edits.append(("embed", 9))
        return _plan(*edits)

    def log(self, line: str) -> None:
        self.logged.append(line)


def _review(answers: list[set[tuple[str, int, str]]], shown: list[list[str]]):  # type: ignore[no-untyped-def]
    def review(hunks: list[Hunk]) -> set[tuple[str, int, str]]:
        shown.append([r for h in hunks for r in sorted({k[2] for k in h.keys})])
        return answers.pop(0)

    return review


def test_a_decline_that_makes_an_edit_needed_is_reviewed_again() -> None:
    ctx, shown = _Context(), []  # type: ignore[var-annotated]
    plan = _reviewed_plan(ctx, {}, _review([{("m.py", 1, "hooks")}, set()], shown))  # type: ignore[arg-type]
    assert shown == [["hooks"], ["embed"]]
    assert ctx.logged == ["the declined hunks make other edits needed: 1 more hunk to review"]
    assert [(s.rule_id, s.line) for s in plan.edited] == [("embed", 9)]


def test_declining_the_new_hunk_too_writes_neither() -> None:
    ctx, shown = _Context(), []  # type: ignore[var-annotated]
    plan = _reviewed_plan(ctx, {}, _review([{("m.py", 1, "hooks")}, {("m.py", 9, "embed")}], shown))  # type: ignore[arg-type]
    assert shown == [["hooks"], ["embed"]]
    assert plan.edited == []
    assert ctx.asked[-1] == {("m.py", 1, "hooks"), ("m.py", 9, "embed")}


def test_accepting_everything_asks_once() -> None:
    ctx, shown = _Context(), []  # type: ignore[var-annotated]
    plan = _reviewed_plan(ctx, {}, _review([set()], shown))  # type: ignore[arg-type]
    assert shown == [["hooks"]] and ctx.logged == [] and len(ctx.asked) == 1
    assert [(s.rule_id, s.line) for s in plan.edited] == [("hooks", 1)]

"""The tiers are explicit: a test that uses a fixture of a tier without carrying its mark is a
collection error, and the releases the tiers run against are named once, in realdata."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import realdata
from conftest import pytest_collection_modifyitems, unmarked


class _Item:
    def __init__(self, fixtures: tuple[str, ...], marks: tuple[str, ...]):
        self.nodeid = "tests/t.py::test_x"
        self.fixturenames = fixtures
        self.marks = marks

    def get_closest_marker(self, name: str) -> str | None:
        return name if name in self.marks else None


@pytest.mark.parametrize(("fixtures", "marks", "missing"), [
    (("tmp_path",), (), []),
    (("sandbox",), (), ["slow"]),
    (("sandbox",), ("slow",), []),
    (("vllm_site",), ("slow",), ["realvllm"]),
    (("vllm_venv_python",), (), ["slow", "realvllm"]),
    (("vllm_venv_python",), ("slow", "realvllm"), []),
], ids=["unit", "slow-unmarked", "slow-marked", "realvllm-unmarked", "both-unmarked", "both-marked"])
def test_unmarked(fixtures: tuple[str, ...], marks: tuple[str, ...], missing: list[str]) -> None:
    assert unmarked(_Item(fixtures, marks)) == missing  # type: ignore[arg-type]


def test_an_unmarked_test_stops_the_collection() -> None:
    with pytest.raises(pytest.UsageError, match=r"^tests without their tier's mark:\ntests/t.py::test_x: mark it slow$"):
        pytest_collection_modifyitems(None, [_Item(("sandbox",), ())])  # type: ignore[arg-type,list-item]


def test_the_releases_are_named_once() -> None:
    assert realdata.VLLM_SOURCES[0] == realdata.REFERENCE_VLLM
    assert (realdata.OLD_SPECULATORS, realdata.NEW_SPECULATORS) == realdata.SPECULATORS[:2]
    assert realdata.SPECULATORS == tuple(sorted(realdata.SPECULATORS, key=lambda v: tuple(map(int, v.split(".")))))


@pytest.mark.parametrize("fetch", ["speculators_wheel", "vllm_source", "debian_python"])
def test_a_unit_test_fetches_no_real_data(fetch: str, request: pytest.FixtureRequest) -> None:
    """A fresh clone with a cold cache and no network runs the unit tier: its tests never reach the
    package index, even where the test cache holds what they would fetch."""
    message = (f"{request.node.nodeid} is a unit test and asks for real data (realdata.{fetch}): "
               f"mark it slow, or give it a fixture of its own")
    with pytest.raises(AssertionError, match=f"^{re.escape(message)}$"):
        getattr(realdata, fetch)()


GROUPED = '''
import os
import pytest


def ran(name):
    with open(os.path.join(os.path.dirname(__file__), "ran.txt"), "a") as f:
        f.write(f"{name} {os.environ['PYTEST_XDIST_WORKER']}\\n")


@pytest.mark.xdist_group("one")
@pytest.mark.parametrize("n", range(4))
def test_one(n):
    ran("one")


@pytest.mark.xdist_group("two")
@pytest.mark.parametrize("n", range(4))
def test_two(n):
    ran("two")


@pytest.mark.parametrize("n", range(4))
def test_free(n):
    pass
'''


def test_ci_s_loadgroup_keeps_a_group_on_one_worker(tmp_path: Path) -> None:
    """.ci/run's `--dist loadgroup` builds a costly module-scoped fixture once only while each
    xdist_group runs on one worker. pytest 9.2 with pytest-xdist 3.8 spreads a group silently
    (pytest-dev/pytest-xdist#1386): the families' fixtures were built twice, the CI 140 s slower."""
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_grouped.py").write_text(GROUPED)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2",
                           "--dist", "loadgroup", str(tmp_path)], capture_output=True, text=True, cwd=tmp_path,
                          env=env, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    workers: dict[str, set[str]] = {}
    for line in (tmp_path / "ran.txt").read_text().splitlines():
        group, worker = line.split()
        workers.setdefault(group, set()).add(worker)
    assert {group: len(w) for group, w in workers.items()} == {"one": 1, "two": 1}, workers

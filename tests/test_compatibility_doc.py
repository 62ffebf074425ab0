"""docs/compatibility.md (written by bench/matrix.py from real runs) covers what the project
commits to: a row for every release with a committed constraints file, a cell for every
speculators release the tool patches, each cell the four parts the matrix writes. A new
constraints file without a matrix run, or a table cut short, fails here."""

from __future__ import annotations

import re
from pathlib import Path

import realdata

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "compatibility.md"
RELEASES = sorted(
    (p.name[len("constraints-vllm-"):-len(".txt")] for p in (REPO / "tests" / "e2e").glob("constraints-vllm-*.txt")),
    key=lambda v: tuple(int(n) for n in v.split(".")),
)
CELL = re.compile(r"^\*\*apply\*\* \(exit -?\d+\): .+<br>\*\*rehearse\*\* \(exit -?\d+\): .+<br>\*\*rules\*\*: .+"
                  r"<br>\*\*rollback\*\* \(exit -?\d+\): .+$")


def _rows() -> list[tuple[str, list[str]]]:
    """The verdict table's rows (release, cells); the wall-time table after it is not read."""
    text = DOC.read_text()
    table = text.split("\n\n| vLLM | speculators", 1)[1].split("\n\n", 1)[0]
    rows = []
    for line in table.splitlines()[2:]:
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        rows.append((cells[0], cells[1:]))
    return rows


def test_every_committed_release_has_a_row_with_a_cell_per_speculators_release() -> None:
    header = DOC.read_text().split("\n\n| vLLM | ", 1)[1].splitlines()[0]
    assert header == " | ".join(f"speculators {s}" for s in realdata.SPECULATORS) + " |"
    rows = _rows()
    assert [release for release, _ in rows] == RELEASES
    for release, cells in rows:
        assert len(cells) == len(realdata.SPECULATORS), release
        for spec, cell in zip(realdata.SPECULATORS, cells):
            assert CELL.match(cell), (release, spec, cell[:200])
            assert re.search(rf"speculators {re.escape(spec)}(?![.\d])", cell), (release, spec)


def test_every_rollback_in_the_table_is_record_exact() -> None:
    for release, cells in _rows():
        for spec, cell in zip(realdata.SPECULATORS, cells):
            assert cell.endswith("**rollback** (exit 0): RECORD-exact"), (release, spec)

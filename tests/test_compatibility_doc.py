"""docs/compatibility.md and docs/compatibility-details.md (written by bench/matrix.py from real
runs, kept in docs/compatibility.json) cover what the project commits to: a row for every release
with a committed constraints file, a cell for every speculators release the tool patches, each
package cell the four parts the matrix writes; a family grid per speculators release the families
ran on, a column per `--arch` preset, each cell what the family table says it must be (no model
class exactly where the release predates the architecture's first release, a pass everywhere
else). Both pages are what the data render to. A new constraints file without a matrix run, a
table cut short, or a family that no longer passes where it ran fails here."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import realdata

from vllm_shim_patch._remote.rehearse import families

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
import _matrix_doc as doc  # noqa: E402

DOCS = REPO / "docs"
GRIDS, DETAILS, DATA = DOCS / "compatibility.md", DOCS / "compatibility-details.md", DOCS / "compatibility.json"
RELEASES = sorted(
    (p.name[len("constraints-vllm-"):-len(".txt")] for p in (REPO / "tests" / "e2e").glob("constraints-vllm-*.txt")),
    key=lambda v: tuple(int(n) for n in v.split(".")),
)
CELL = re.compile(r"^\*\*apply\*\* \(exit -?\d+\): .+<br>\*\*rehearse\*\* \(exit -?\d+\): .+<br>\*\*rules\*\*: .+"
                  r"<br>\*\*rollback\*\* \(exit -?\d+\): .+$")
PRESETS = [n for f in families.FAMILIES.values() for n in (f.NAME, *f.PRESETS)]
# The family matrix's floor (issue 27): these releases ran every family on both speculators.
FAMILY_RELEASES = ("0.12.0", "0.15.1", "0.16.0", "0.24.0", "0.28.0", "0.33.0")
FAMILY_SPECULATORS = (realdata.OLD_SPECULATORS, realdata.NEW_SPECULATORS)
# Releases whose package cells do not all pass on main (a release lands with its measured row
# before the rules for it: vLLM 0.34.0 did, until Model Runner V2's rules and adapter).
NOT_PASSING_YET: tuple[str, ...] = ()
# Family cells measured as "cannot rehearse" (a stand-in gap, not speculators'): none since the MLA
# stand-in runs over Model Runner V2's paged cache (vLLM 0.34.0's deepseek, mistral-large-3,
# kimi-k2.5 were).
CANNOT_YET: set[tuple[str, str]] = set()


def _cells(line: str) -> list[str]:
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


def _table(text: str, header: str) -> list[list[str]]:
    """The rows (cells) of the table whose header row starts with `header`."""
    table = text.split(f"\n\n{header}", 1)[1].split("\n\n", 1)[0]
    return [_cells(line) for line in table.splitlines()[2:]]


def _version(v: str) -> tuple[int, ...]:
    return tuple(int(n) for n in v.split()[0].split("."))


def test_the_pages_are_what_the_data_render_to() -> None:
    data = doc.load(DATA)
    releases = sorted({*RELEASES, *(c.vllm for c in data.cells), *(c.vllm for c in data.family_cells)},
                      key=doc.version_key)
    specs = list(realdata.SPECULATORS)
    assert GRIDS.read_text() == doc.render(data, releases, PRESETS, specs), "run: python bench/matrix.py --merge"
    assert DETAILS.read_text() == doc.render_details(data, specs), "run: python bench/matrix.py --merge"


def test_every_committed_release_has_a_row_with_a_cell_per_speculators_release() -> None:
    text = DETAILS.read_text()
    header = text.split("\n\n| vLLM | ", 1)[1].splitlines()[0]
    assert header == " | ".join(f"speculators {s}" for s in realdata.SPECULATORS) + " |"
    rows = _table(text, "| vLLM | speculators")
    assert [release for release, *_ in rows] == RELEASES
    for release, *cells in rows:
        assert len(cells) == len(realdata.SPECULATORS), release
        for spec, cell in zip(realdata.SPECULATORS, cells):
            assert CELL.match(cell), (release, spec, cell[:200])
            assert re.search(rf"speculators {re.escape(spec)}(?![.\d])", cell), (release, spec)


def test_every_rollback_in_the_table_is_record_exact() -> None:
    for release, *cells in _table(DETAILS.read_text(), "| vLLM | speculators"):
        for spec, cell in zip(realdata.SPECULATORS, cells):
            assert cell.endswith("**rollback** (exit 0): RECORD-exact"), (release, spec)
    for cell in doc.load(DATA).family_cells:
        assert (cell.record_exact, cell.rollback and cell.rollback.rc) == (True, 0), (cell.vllm, cell.speculators)


def test_the_package_grid_has_a_symbol_for_every_release_and_speculators_release() -> None:
    text = GRIDS.read_text()
    assert "\n".join(f"- {s} {words}" for s, words in doc.LEGEND) in text
    rows = _table(text, "| vLLM | speculators")
    assert [release for release, *_ in rows] == RELEASES
    passing = [doc.PASS] * len(realdata.SPECULATORS)
    assert all(cells == passing for release, *cells in rows if release not in NOT_PASSING_YET), rows
    # What main does there today, as measured: once it passes, it leaves this list.
    assert all(cells != passing for release, *cells in rows if release in NOT_PASSING_YET), rows


def test_each_family_grid_holds_to_the_family_table() -> None:
    """A column per preset; each cell run is "no model class" exactly where the release predates
    the first release with the preset's architecture (families' FIRST_RELEASE), "cannot rehearse"
    exactly at CANNOT_YET, a pass elsewhere."""
    text = GRIDS.read_text()
    for spec in FAMILY_SPECULATORS:
        head = text.split(f"## Model families, speculators {spec}\n", 1)[1]
        header = head.split("\n\n| vLLM | ", 1)[1].splitlines()[0]
        assert header == " | ".join(f"`{p}`" for p in PRESETS) + " |"
        rows = {re.sub(r"^\[([^]]+)\].*$", r"\1", release): cells for release, *cells in _table(head, "| vLLM | ")}
        assert list(rows) == RELEASES
        # A family that lands is "not yet run" (·) until the family matrix runs it; the floor's
        # releases ran every family there was then.
        ran = {release for release, cells in rows.items() if any(c != doc.NOT_RUN for c in cells)}
        assert set(FAMILY_RELEASES) <= ran, (spec, sorted(set(FAMILY_RELEASES) - ran))
        for release, cells in rows.items():
            for preset, cell in zip(PRESETS, cells):
                if cell == doc.NOT_RUN:
                    continue
                family, config = families.preset(preset)
                arch = config["architectures"][0]
                first = families.first_release(family, arch)
                want = (doc.NO_CLASS if _version(release) < _version(first)
                        else doc.CANNOT if (release, preset) in CANNOT_YET else doc.PASS)
                assert cell == want, (spec, release, preset, cell)


def test_the_data_name_the_run_of_every_family_cell() -> None:
    for cell in doc.load(DATA).family_cells:
        assert cell.generated and cell.commit and "uncommitted" not in cell.commit, (cell.vllm, cell.speculators)
        presets = [r.family for r in cell.runs]
        # Each preset once; a preset added after the run is not in it (its cell: not yet run).
        assert len(presets) == len(set(presets)) and set(presets) <= set(PRESETS), (cell.vllm, cell.speculators)

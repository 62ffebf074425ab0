"""The compatibility matrix's data and its two pages, for bench/matrix.py.

The data (`docs/compatibility.json`) is every cell of every run merged: the package cells (one per
vLLM release x speculators release: apply, rehearse on the default tiny Llama, rollback) and the
family cells (one per release x speculators release: apply, then one rehearsal of each family's
`--arch` preset, then rollback), each with the date and commit of its run. From it:
`docs/compatibility.md`, glanceable grids of symbols (a legend, one grid for the package, one
per speculators release for the families), and `docs/compatibility-details.md`, the long
verdicts and the wall times behind each symbol.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

PASS, WRONG, NO_CLASS, CANNOT, NOT_RUN = "✅", "❌", "⛔", "⚠️", "·"
LEGEND = [
    (PASS, "pass: the rehearsal's data are right (exit 0)"),
    (WRONG, "speculators wrong: its generator crashed or returned wrong data (exit 1)"),
    (NO_CLASS, "this vLLM has no model class for the architecture: it cannot load the model, patched or not "
               "(exit 2)"),
    (CANNOT, "cannot rehearse: a stand-in gap, the op or seam named in the details (exit 2)"),
    (NOT_RUN, "not run"),
]
DETAILS = "compatibility-details.md"


def version_key(v: str) -> tuple[int, ...]:
    return tuple(int(p) if p.isdigit() else -1 for p in re.split(r"[.]", v))


@dataclass
class Step:
    argv: list[str]
    rc: int
    verdict: str  # the command's first line on stdout (its final verdict)
    seconds: float
    stderr_tail: str = ""


@dataclass
class Cell:
    """The package on one release: apply (with its rehearsal), rehearse, rollback."""

    vllm: str
    speculators: str
    apply: Step | None = None
    rules: list[str] = field(default_factory=list)
    state: str = ""
    rehearse: Step | None = None
    rollback: Step | None = None
    record_exact: bool | None = None
    record_problems: list[str] = field(default_factory=list)


@dataclass
class FamilyRun:
    """One `rehearse --arch PRESET --json` after apply."""

    family: str  # the --arch preset
    architecture: str
    rc: int
    outcome: str
    verdict: str  # the rehearsal's headline
    seconds: float  # wall clock of the command
    detail: str = ""  # the failure's exception, where it did not pass
    max_rel_diff: float | None = None
    checks: str = ""  # "ok/total" self-checks


@dataclass
class FamilyCell:
    """Every family on one release x speculators release, in one sandbox after one apply."""

    vllm: str
    speculators: str
    generated: str
    commit: str
    apply: Step | None = None
    rules: list[str] = field(default_factory=list)
    runs: list[FamilyRun] = field(default_factory=list)
    rollback: Step | None = None
    record_exact: bool | None = None
    record_problems: list[str] = field(default_factory=list)


@dataclass
class Matrix:
    """Everything measured: the package cells (with their runs' dates and commits) and the family cells."""

    generated: str = ""
    commit: str = ""
    builds_s: dict[str, float] = field(default_factory=dict)
    cells: list[Cell] = field(default_factory=list)
    family_cells: list[FamilyCell] = field(default_factory=list)

    def as_json(self) -> str:
        return json.dumps(asdict(self), indent=2, ensure_ascii=False) + "\n"


def _step(raw: dict | None) -> Step | None:
    return Step(**raw) if raw else None


def load(path: Path) -> Matrix:
    """A --json-out file (or docs/compatibility.json)."""
    data = json.loads(path.read_text())
    cells = [Cell(**{**raw, **{k: _step(raw.get(k)) for k in ("apply", "rehearse", "rollback")}})
             for raw in data.get("cells") or []]
    fams = [FamilyCell(**{**raw, "apply": _step(raw.get("apply")), "rollback": _step(raw.get("rollback")),
                          "runs": [FamilyRun(**r) for r in raw.get("runs") or []]})
            for raw in data.get("family_cells") or []]
    return Matrix(data.get("generated", ""), data.get("commit", ""), dict(data.get("builds_s") or {}), cells, fams)


def merge(runs: list[Matrix]) -> Matrix:
    """One matrix from several, later ones winning: a release's package cells are taken whole from
    the last run that has the release; a family's rehearsal from the last run that has it."""
    out = Matrix()
    dates: list[str] = []
    commits: list[str] = []
    package: dict[tuple[str, str], Cell] = {}
    families: dict[tuple[str, str], FamilyCell] = {}
    for run in runs:
        out.builds_s.update(run.builds_s)
        if run.cells:
            releases = {c.vllm for c in run.cells}
            package = {k: c for k, c in package.items() if k[0] not in releases}
            package.update({(c.vllm, c.speculators): c for c in run.cells})
            dates += [d for d in run.generated.split(", ") if d]
            commits += [c for c in run.commit.split(", ") if c]
        for cell in run.family_cells:
            key = (cell.vllm, cell.speculators)
            old = families.get(key)
            if old is not None:
                kept = [r for r in old.runs if r.family not in {n.family for n in cell.runs}]
                cell.runs = kept + cell.runs
            families[key] = cell
    out.generated = ", ".join(sorted(set(dates)))
    out.commit = ", ".join(sorted(set(commits)))
    out.cells = sorted(package.values(), key=lambda c: (version_key(c.vllm), c.speculators))
    out.family_cells = sorted(families.values(), key=lambda c: (version_key(c.vllm), version_key(c.speculators)))
    return out


def symbol(rc: int, outcome: str) -> str:
    if rc == 0 and outcome == "passed":
        return PASS
    if rc == 1 or outcome == "failed":
        return WRONG
    return NO_CLASS if outcome == "no_model_class" else CANNOT


def package_symbol(c: Cell) -> str:
    """The package cell at a glance: the rehearsal's symbol, and what else did not hold."""
    if not (c.apply and c.rehearse and c.rollback):
        return NOT_RUN
    outcome = ("passed" if c.rehearse.rc == 0 else "failed" if c.rehearse.rc == 1
               else "no_model_class" if "has no model class" in c.rehearse.verdict else "cannot_rehearse")
    marks = [symbol(c.rehearse.rc, outcome)]
    if c.apply.rc != 0:
        marks.append(f"apply exit {c.apply.rc}")
    if not c.record_exact:
        marks.append("rollback not RECORD-exact")
    return " ".join(marks)


def anchor(vllm: str, spec: str) -> str:
    """The anchor GitHub gives the details page's heading "vLLM X, speculators V"."""
    return f"vllm-{vllm.replace('.', '')}-speculators-{spec.replace('.', '')}"


def md(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


INTRO = """\
Generated by `python bench/matrix.py` from real runs (do not edit by hand; the data are
`docs/compatibility.json`, the long verdicts [the details page]({details})). Each vLLM release is
really installed from its `tests/e2e/constraints-vllm-X.txt` (a CPU machine, the CUDA build of
torch from PyPI, imported only), each speculators release installed `--no-deps` into a venv that
sees it; then `patch-speculators --vllm-version X` (apply), the rehearsal of the package as apply
left it, and `rollback`, checked RECORD-exact afterwards.
"""


def legend() -> list[str]:
    return [f"- {s} {words}" for s, words in LEGEND]


def render(m: Matrix, releases: list[str], presets: list[str], specs: list[str]) -> str:
    """docs/compatibility.md: the legend and the grids."""
    lines = ["# Compatibility: speculators on each vLLM release", "", INTRO.format(details=DETAILS),
             *legend(), "",
             "## The package (the default tiny Llama)", "",
             f"Apply, rehearse and rollback; generated {m.generated or '-'} with vllm-shim-patch at commit "
             f"{m.commit or '-'}.", ""]
    by = {(c.vllm, c.speculators): c for c in m.cells}
    lines += ["| vLLM | " + " | ".join(f"speculators {s}" for s in specs) + " |", "|---|" + "---|" * len(specs)]
    for rel in releases:
        row = [package_symbol(by[(rel, s)]) if (rel, s) in by else NOT_RUN for s in specs]
        lines.append(f"| {rel} | " + " | ".join(row) + " |")
    fams = {(c.vllm, c.speculators): c for c in m.family_cells}
    for spec in specs:
        cells = [c for c in m.family_cells if c.speculators == spec]
        if not cells:
            continue
        when = ", ".join(sorted({c.generated for c in cells}))
        commits = ", ".join(sorted({c.commit for c in cells}))
        lines += ["", f"## Model families, speculators {spec}", "",
                  f"Each family's `--arch` preset (its published config.json, shrunk) rehearsed after apply; "
                  f"generated {when} with vllm-shim-patch at commit {commits}.", "",
                  "| vLLM | " + " | ".join(f"`{p}`" for p in presets) + " |", "|---|" + "---|" * len(presets)]
        for rel in releases:
            cell = fams.get((rel, spec))
            runs = {r.family: r for r in cell.runs} if cell else {}
            row = [symbol(runs[p].rc, runs[p].outcome) if p in runs else NOT_RUN for p in presets]
            head = f"[{rel}]({DETAILS}#{anchor(rel, spec)})" if cell else rel
            lines.append(f"| {head} | " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def render_details(m: Matrix, specs: list[str]) -> str:
    """docs/compatibility-details.md: every command's verdict line, exit code and wall time."""
    lines = ["# Compatibility: the details", "",
             "Generated by `python bench/matrix.py` with the grids of [compatibility.md](compatibility.md), "
             "from the same runs (do not edit by hand).", "",
             "## The package (the default tiny Llama)", "",
             "| vLLM | " + " | ".join(f"speculators {s}" for s in specs) + " |", "|---|" + "---|" * len(specs)]
    by = {(c.vllm, c.speculators): c for c in m.cells}
    for rel in sorted({c.vllm for c in m.cells}, key=version_key):
        row = [_package_cell(by[(rel, s)]) if (rel, s) in by else "not run" for s in specs]
        lines.append(f"| {rel} | " + " | ".join(row) + " |")
    lines += ["", "Wall times on this machine (2 cores, shared):", "",
              "| vLLM | venv (build or reuse) | "
              + " | ".join(f"{s}: apply / rehearse / rollback" for s in specs) + " |",
              "|---|---|" + "---|" * len(specs)]
    for rel in sorted({c.vllm for c in m.cells}, key=version_key):
        row = []
        for s in specs:
            c = by.get((rel, s))
            row.append(f"{c.apply.seconds:.0f} s / {c.rehearse.seconds:.0f} s / {c.rollback.seconds:.0f} s"
                       if c and c.apply and c.rehearse and c.rollback else "")
        lines.append(f"| {rel} | {m.builds_s.get(rel, 0):.0f} s | " + " | ".join(row) + " |")
    for cell in m.family_cells:
        # GitHub's anchor for this heading is anchor(vllm, speculators).
        lines += ["", f"## vLLM {cell.vllm}, speculators {cell.speculators}",
                  "", f"Generated {cell.generated} with vllm-shim-patch at commit {cell.commit}.", ""]
        lines += _family_cell(cell)
    return "\n".join(lines) + "\n"


def _package_cell(c: Cell) -> str:
    assert c.apply and c.rehearse and c.rollback
    parts = [f"**apply** (exit {c.apply.rc}): {md(c.apply.verdict)}",
             f"**rehearse** (exit {c.rehearse.rc}): {md(c.rehearse.verdict)}",
             "**rules**: " + (", ".join(f"`{r}`" for r in c.rules) if c.rules
                              else f"none recorded (state: {c.state or 'not tracked'})"),
             f"**rollback** (exit {c.rollback.rc}): "
             + ("RECORD-exact" if c.record_exact else "NOT RECORD-exact: " + md("; ".join(c.record_problems[:5])))]
    return "<br>".join(parts)


def _family_cell(cell: FamilyCell) -> list[str]:
    out = []
    if cell.apply:
        out.append(f"- **apply** (exit {cell.apply.rc}, {cell.apply.seconds:.0f} s): {md(cell.apply.verdict)}")
    out.append("- **rules**: " + (", ".join(f"`{r}`" for r in cell.rules) or "none recorded"))
    if cell.rollback:
        out.append(f"- **rollback** (exit {cell.rollback.rc}): "
                   + ("RECORD-exact" if cell.record_exact else "NOT RECORD-exact: "
                      + md("; ".join(cell.record_problems[:5]))))
    out += ["", "| family | architecture | | exit | verdict | self-checks | s |", "|---|---|---|---|---|---|---|"]
    for r in cell.runs:
        out.append(f"| `{r.family}` | {r.architecture} | {symbol(r.rc, r.outcome)} | {r.rc} | {md(r.verdict)} | "
                   f"{r.checks} | {r.seconds:.0f} |")
    return out

#!/usr/bin/env python3
"""The compatibility matrix: every vLLM release x every speculators release (x every model family),
from real runs.

    python bench/matrix.py [--vllm X ...] [--all] [--speculators V ...]
    python bench/matrix.py --families [--vllm X ...] [--speculators V ...] [--family PRESET ...]
    python bench/matrix.py --merge A.json B.json ...

Releases: those with a committed tests/e2e/constraints-vllm-X.txt (default), the ones named with
--vllm, or with --all every release from 0.12.0 to 0.33.0 on the package index (a release
without a constraints file is frozen first: `build_env.py --vllm X --freeze`, again with the
`--require` the script names when the resolve pairs the CUDA packages wrongly). Each release's
venv comes from tests/e2e/build_env.py (built or reused, uv, one shared cache).

For each release and each speculators release (tests/realdata.py SPECULATORS), in a throwaway
venv holding that speculators wheel (--no-deps) that sees the release's venv through a .pth
file, as the real-vLLM tests do: `patch-speculators --vllm-version X` (apply: plan, write,
verify, rehearse, commit or restore), `status --json` (the rules applied), `rehearse` (the
package as apply left it), `rollback`, and a check that every file is RECORD-exact afterwards.
With --families: apply without its rehearsal, then `rehearse --arch PRESET --json` for every
model family's preset (or the --family ones), then rollback.

What a run measured is merged into docs/compatibility.json (the data: a release's package cells
taken whole from the last run that has it, a family's rehearsal from the last run that has it),
and both pages are written from it: docs/compatibility.md (glanceable grids: the package, and one
per speculators release for the families) and docs/compatibility-details.md (every verdict line,
exit code and wall time), with each run's date and the tool's commit. --json-out also writes the
run's own results. --merge writes the data and the pages from --json-out files, running nothing.
Not run in CI: a release venv is ~11 GB and each cell takes a minute or two on CPU. Two halves
side by side, one per core, each with its own output:

    python bench/matrix.py --vllm 0.12.0 ... --json-out /tmp/a.json --data /tmp/a-all.json &
    python bench/matrix.py --vllm 0.24.0 ... --json-out /tmp/b.json --data /tmp/b-all.json
    python bench/matrix.py --merge docs/compatibility.json /tmp/a.json /tmp/b.json
"""

from __future__ import annotations

import argparse
import base64
import datetime
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
E2E = REPO / "tests" / "e2e"
BUILD_ENV = E2E / "build_env.py"
sys.path.insert(0, str(REPO / "tests"))
import realdata  # noqa: E402
from _matrix_doc import (  # noqa: E402
    Cell, FamilyCell, FamilyRun, Matrix, Step, load, merge, render, render_details, version_key,
)

LOWEST, HIGHEST = (0, 12, 0), (0, 33, 0)
DOCS = REPO / "docs"


def log(msg: str) -> None:
    print(f"[matrix] {msg}", file=sys.stderr, flush=True)


def constrained_releases() -> list[str]:
    found = [p.name[len("constraints-vllm-"):-len(".txt")] for p in E2E.glob("constraints-vllm-*.txt")]
    return sorted(found, key=version_key)


def index_releases() -> list[str]:
    """Every final vLLM release from 0.12.0 to 0.33.0 that the package index lists."""
    out = subprocess.run([sys.executable, "-m", "pip", "index", "versions", "vllm"],
                         capture_output=True, text=True, check=True).stdout
    listed = re.search(r"Available versions: (.*)", out)
    if not listed:
        raise SystemExit(f"matrix: pip index versions vllm gave no list:\n{out}")
    versions = [v.strip() for v in listed.group(1).split(",")]
    plain = [v for v in versions if re.fullmatch(r"\d+\.\d+\.\d+", v)]
    return sorted((v for v in plain if LOWEST <= version_key(v) <= HIGHEST), key=version_key)


def build_env(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(BUILD_ENV), *args], capture_output=True, text=True)


def release_python(vllm: str) -> tuple[Path, float]:
    """The release venv's python (frozen first if it has no constraints file), and the seconds."""
    t0 = time.monotonic()
    if not (E2E / f"constraints-vllm-{vllm}.txt").is_file():
        proc = build_env("--vllm", vllm, "--freeze", "--print-path")
        need = re.search(r"--require '([^']+)'", proc.stderr) if proc.returncode else None
        if need:
            log(f"vLLM {vllm}: freezing again with --require {need.group(1)!r}")
            proc = build_env("--vllm", vllm, "--freeze", "--require", need.group(1), "--print-path")
    else:
        proc = build_env("--vllm", vllm, "--print-path")
    if proc.returncode != 0:
        raise RuntimeError(f"build_env.py --vllm {vllm} failed:\n{proc.stderr[-3000:]}")
    return Path(proc.stdout.strip().splitlines()[-1]), time.monotonic() - t0


def purelib(python: Path) -> Path:
    return Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               capture_output=True, text=True, check=True).stdout.strip())


def tool() -> list[str]:
    script = Path(sys.executable).parent / "patch-speculators"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "vllm_shim_patch"]


def run_tool(python: Path, state: Path, *args: str, timeout: float = 1800) -> Step:
    return run_tool_output(python, state, *args, timeout=timeout)[0]


def run_tool_output(python: Path, state: Path, *args: str, timeout: float = 1800) -> tuple[Step, str]:
    """The command's Step and its whole stdout."""
    argv = [*tool(), "--python", str(python), "--state-dir", str(state), *args]
    env = {k: v for k, v in os.environ.items() if not k.startswith("VSP_TEST_") and k != "PYTHONPATH"}
    env["NO_COLOR"] = "1"
    t0 = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
    # The verdict is stdout's first line: details follow it (wrong sequences, or the rest of a
    # multi-line exception message, such as pydantic's "For further information" line).
    lines = proc.stdout.strip().splitlines() or proc.stderr.strip().splitlines() or ["(no output)"]
    return Step(argv[len(tool()):], proc.returncode, lines[0], time.monotonic() - t0,
                proc.stderr[-2000:]), proc.stdout


def record_mismatches(site: Path) -> list[str]:
    """Files of the speculators distribution whose sha256 differs from RECORD's."""
    dist = next(site.glob("speculators-*.dist-info"))
    problems = []
    for line in (dist / "RECORD").read_text().splitlines():
        path, digest, _ = line.rsplit(",", 2)
        if not digest:
            continue
        algo, want = digest.split("=", 1)
        target = site / path
        if not target.is_file():
            problems.append(f"{path}: missing")
            continue
        got = base64.urlsafe_b64encode(hashlib.new(algo, target.read_bytes()).digest()).rstrip(b"=").decode()
        if got != want:
            problems.append(f"{path}: differs from RECORD")
    return problems


def run_cell(vllm: str, env_python: Path, spec: str) -> Cell:
    cell = Cell(vllm, spec)
    with tempfile.TemporaryDirectory(prefix=f"vsp-matrix-{vllm}-{spec}-") as tmp:
        root = Path(tmp)
        python, site = sandbox(root, vllm, env_python, spec)
        state = root / "state"
        cell.apply = run_tool(python, state, "--vllm-version", vllm)
        cell.rules, cell.state = status_rules(python, state)
        cell.rehearse = run_tool(python, state, "rehearse")
        cell.rollback = run_tool(python, state, "rollback")
        cell.record_problems = record_mismatches(site)
        cell.record_exact = not cell.record_problems
    return cell


def sandbox(root: Path, vllm: str, env_python: Path, spec: str) -> tuple[Path, Path]:
    """A venv with the speculators wheel that sees the release's vLLM: (its python, its site)."""
    subprocess.run([str(env_python), "-m", "venv", "--without-pip", str(root / "venv")], check=True)
    python = root / "venv" / "bin" / "python"
    site = purelib(python)
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet",
                    "--no-deps", str(realdata.speculators_wheel(spec))], check=True, capture_output=True)
    # After the sandbox's own site-packages: its speculators wins, the release's vLLM is found.
    (site / f"zz-vllm-{vllm}.pth").write_text(f"{purelib(env_python)}\n")
    return python, site


def status_rules(python: Path, state: Path) -> tuple[list[str], str]:
    proc = subprocess.run([*tool(), "--python", str(python), "--state-dir", str(state), "status", "--json"],
                          capture_output=True, text=True, check=False)
    try:
        info = json.loads(proc.stdout)
        return list(info.get("rules") or []), str(info.get("state", ""))
    except ValueError:
        return [], f"status failed (exit {proc.returncode})"


def presets() -> list[str]:
    """Every family's --arch preset, in the family table's order (each family's own first)."""
    from vllm_shim_patch.analysis.rehearse import families

    table = families()
    return [n for f in table.FAMILIES.values() for n in (f.NAME, *f.PRESETS)]


def rehearse_family(python: Path, state: Path, preset: str) -> FamilyRun:
    """`rehearse --arch PRESET --json` on the package as apply left it."""
    from vllm_shim_patch.analysis.handoff import Answer, HandoffError
    from vllm_shim_patch.analysis.rehearse import interpret
    from vllm_shim_patch.report.rehearse import headline

    step, stdout = run_tool_output(python, state, "rehearse", "--arch", preset, "--json")
    try:
        data = json.loads(stdout)
    except ValueError:
        return FamilyRun(preset, "?", step.rc, "error", f"no JSON answer: {step.verdict}", step.seconds,
                         step.stderr_tail[-500:])
    try:
        # The command's JSON is the answer's with the command's own keys beside it.
        answer = Answer.from_json({k: v for k, v in data.items() if k in Answer.__dataclass_fields__})
    except HandoffError as exc:
        return FamilyRun(preset, "?", step.rc, "error", f"no rehearsal answer: {exc}", step.seconds,
                         step.stderr_tail[-500:])
    failure = data.get("failure") or {}
    checks = data.get("checks") or []
    return FamilyRun(preset, str(data.get("architecture") or "?"), step.rc, str(data.get("outcome")),
                     headline(interpret(answer, None)), step.seconds,
                     "" if step.rc == 0 else str(failure.get("exception") or ""),
                     data.get("max_rel_diff"), f"{sum(1 for c in checks if c.get('ok'))}/{len(checks)}")


def run_family_cell(vllm: str, env_python: Path, spec: str, names: list[str], when: str, commit: str) -> FamilyCell:
    cell = FamilyCell(vllm, spec, when, commit)
    with tempfile.TemporaryDirectory(prefix=f"vsp-matrix-{vllm}-{spec}-") as tmp:
        root = Path(tmp)
        python, site = sandbox(root, vllm, env_python, spec)
        state = root / "state"
        cell.apply = run_tool(python, state, "--vllm-version", vllm, "--no-rehearse")
        cell.rules, _ = status_rules(python, state)
        for name in names:
            run = rehearse_family(python, state, name)
            log(f"vLLM {vllm} x speculators {spec} x {name}: exit {run.rc} {run.outcome} ({run.seconds:.0f} s)")
            cell.runs.append(run)
        cell.rollback = run_tool(python, state, "rollback")
        cell.record_problems = record_mismatches(site)
        cell.record_exact = not cell.record_problems
    return cell


def git_commit() -> str:
    rev = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short=12", "HEAD"],
                         capture_output=True, text=True).stdout.strip() or "unknown"
    dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    return rev + (" (with uncommitted changes)" if dirty else "")


def write(data: Path, measured: Matrix, json_out: Path | None, specs: list[str]) -> Matrix:
    """The run's results into the data (and --json-out), both pages from the data."""
    if json_out:
        json_out.write_text(measured.as_json())
    merged = merge([load(data), measured] if data.is_file() else [measured])
    data.parent.mkdir(parents=True, exist_ok=True)
    data.write_text(merged.as_json())
    pages(merged, data.parent, specs)
    return merged


def pages(m: Matrix, folder: Path, specs: list[str]) -> None:
    releases = sorted({*constrained_releases(), *(c.vllm for c in m.cells), *(c.vllm for c in m.family_cells)},
                      key=version_key)
    (folder / "compatibility.md").write_text(render(m, releases, presets(), specs))
    (folder / "compatibility-details.md").write_text(render_details(m, specs))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vllm", action="append", metavar="X", help="a release (repeatable)")
    ap.add_argument("--all", action="store_true", help="every release 0.12.0..0.33.0 on the index")
    ap.add_argument("--speculators", action="append", metavar="V",
                    help=f"a speculators release (repeatable; default: {', '.join(realdata.SPECULATORS)})")
    ap.add_argument("--families", action="store_true",
                    help="rehearse every model family's --arch preset after apply (release x speculators x family)")
    ap.add_argument("--family", action="append", metavar="PRESET", help="with --families: only these (repeatable)")
    ap.add_argument("--data", type=Path, default=DOCS / "compatibility.json",
                    help="the merged data, and the folder the pages are written to (default: docs/)")
    ap.add_argument("--json-out", type=Path, default=None,
                    help="also write this run's own results (argv, exit codes, stderr tails) as JSON")
    ap.add_argument("--merge", nargs="+", type=Path, metavar="JSON",
                    help="write the data and the pages from these files (later ones win); run nothing")
    args = ap.parse_args()
    specs = list(realdata.SPECULATORS)
    if args.merge:
        if args.vllm or args.all or args.families:
            ap.error("--merge runs nothing: leave out --vllm, --all and --families")
        merged = merge([load(p) for p in args.merge])
        args.data.write_text(merged.as_json())
        pages(merged, args.data.parent, specs)
        log(f"wrote {args.data} and its pages from {len(args.merge)} files")
        return 0
    releases = index_releases() if args.all else (args.vllm or constrained_releases())
    run_specs = args.speculators or specs
    names = args.family or presets()
    unknown = sorted(set(names) - set(presets()))
    if unknown:
        ap.error(f"--family {', '.join(unknown)}: no such preset (known: {', '.join(presets())})")
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    measured = Matrix(when, git_commit())
    for rel in releases:
        try:
            env_python, measured.builds_s[rel] = release_python(rel)
        except RuntimeError as exc:
            log(str(exc))
            continue
        log(f"vLLM {rel}: venv {env_python.parent.parent} ({measured.builds_s[rel]:.0f} s)")
        for spec in run_specs:
            if args.families:
                measured.family_cells.append(run_family_cell(rel, env_python, spec, names, when, measured.commit))
                continue
            cell = run_cell(rel, env_python, spec)
            assert cell.apply and cell.rehearse
            log(f"vLLM {rel} x speculators {spec}: apply {cell.apply.rc}, rehearse {cell.rehearse.rc}, "
                f"RECORD-exact {cell.record_exact} ({cell.apply.seconds:.0f}+{cell.rehearse.seconds:.0f} s)")
            measured.cells.append(cell)
            # After every release, so a run stopped part-way keeps what it measured.
        write(args.data, measured, args.json_out, specs)
    if args.families and not measured.family_cells:
        return 1
    log(f"wrote {args.data} and its pages" + (f", and {args.json_out}" if args.json_out else ""))
    cells = [*measured.cells, *measured.family_cells]
    return 0 if all(c.record_exact for c in cells) else 1


if __name__ == "__main__":
    sys.exit(main())

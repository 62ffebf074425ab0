#!/usr/bin/env python3
"""The compatibility matrix: every vLLM release x every speculators release, from real runs.

    python bench/matrix.py [--vllm X ...] [--all] [--speculators V ...] [--out docs/compatibility.md]
    python bench/matrix.py --merge A.json B.json ... [--out docs/compatibility.md]

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
Written: the Markdown table (one row per release, one column per speculators release: the
final verdict line and exit code of apply and of rehearse, the rules applied, rollback), the
date and the tool's commit; with --json-out the raw results too. Not run in CI: a
release venv is ~11 GB and each cell takes a minute or two on CPU.

--merge writes the table from the --json-out files of several runs, running nothing: a
release in more than one file is taken whole from the last; the table names every run's date
and commit. Two halves side by side, one per core, each with its own output:

    python bench/matrix.py --vllm 0.12.0 ... --out /tmp/a.md --json-out /tmp/a.json &
    python bench/matrix.py --vllm 0.24.0 ... --out /tmp/b.md --json-out /tmp/b.json
    python bench/matrix.py --merge /tmp/a.json /tmp/b.json
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
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
E2E = REPO / "tests" / "e2e"
BUILD_ENV = E2E / "build_env.py"
sys.path.insert(0, str(REPO / "tests"))
import realdata  # noqa: E402

LOWEST, HIGHEST = (0, 12, 0), (0, 33, 0)


def log(msg: str) -> None:
    print(f"[matrix] {msg}", file=sys.stderr, flush=True)


def version_key(v: str) -> tuple[int, ...]:
    return tuple(int(p) if p.isdigit() else -1 for p in re.split(r"[.]", v))


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


@dataclass
class Step:
    argv: list[str]
    rc: int
    verdict: str  # the command's first line on stdout (its final verdict)
    seconds: float
    stderr_tail: str = ""


@dataclass
class Cell:
    vllm: str
    speculators: str
    apply: Step | None = None
    rules: list[str] = field(default_factory=list)
    state: str = ""
    rehearse: Step | None = None
    rollback: Step | None = None
    record_exact: bool | None = None
    record_problems: list[str] = field(default_factory=list)


def tool() -> list[str]:
    script = Path(sys.executable).parent / "patch-speculators"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "vllm_shim_patch"]


def run_tool(python: Path, state: Path, *args: str, timeout: float = 1800) -> Step:
    argv = [*tool(), "--python", str(python), "--state-dir", str(state), *args]
    env = {k: v for k, v in os.environ.items() if not k.startswith("VSP_TEST_") and k != "PYTHONPATH"}
    env["NO_COLOR"] = "1"
    t0 = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
    # The verdict is stdout's first line: details follow it (wrong sequences, or the rest of a
    # multi-line exception message, such as pydantic's "For further information" line).
    lines = proc.stdout.strip().splitlines() or proc.stderr.strip().splitlines() or ["(no output)"]
    return Step(argv[len(tool()):], proc.returncode, lines[0], time.monotonic() - t0,
                proc.stderr[-2000:])


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
    wheel = realdata.speculators_wheel(spec)
    with tempfile.TemporaryDirectory(prefix=f"vsp-matrix-{vllm}-{spec}-") as tmp:
        root = Path(tmp)
        subprocess.run([str(env_python), "-m", "venv", "--without-pip", str(root / "venv")], check=True)
        python = root / "venv" / "bin" / "python"
        site = purelib(python)
        subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet",
                        "--no-deps", str(wheel)], check=True, capture_output=True)
        # After the sandbox's own site-packages: its speculators wins, the release's vLLM is found.
        (site / f"zz-vllm-{vllm}.pth").write_text(f"{purelib(env_python)}\n")
        state = root / "state"
        cell.apply = run_tool(python, state, "--vllm-version", vllm)
        proc = subprocess.run([*tool(), "--python", str(python), "--state-dir", str(state),
                               "status", "--json"], capture_output=True, text=True, check=False)
        try:
            info = json.loads(proc.stdout)
            cell.rules, cell.state = list(info.get("rules") or []), str(info.get("state", ""))
        except ValueError:
            cell.state = f"status failed (exit {proc.returncode})"
        cell.rehearse = run_tool(python, state, "rehearse")
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


def md(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def render_cell(c: Cell) -> str:
    assert c.apply and c.rehearse and c.rollback
    parts = [f"**apply** (exit {c.apply.rc}): {md(c.apply.verdict)}",
             f"**rehearse** (exit {c.rehearse.rc}): {md(c.rehearse.verdict)}",
             "**rules**: " + (", ".join(f"`{r}`" for r in c.rules) if c.rules
                              else f"none recorded (state: {c.state or 'not tracked'})"),
             f"**rollback** (exit {c.rollback.rc}): "
             + ("RECORD-exact" if c.record_exact else "NOT RECORD-exact: " + md("; ".join(c.record_problems[:5])))]
    return "<br>".join(parts)


def render(cells: list[Cell], builds: dict[str, float], specs: list[str], when: str, commit: str) -> str:
    releases = sorted({c.vllm for c in cells}, key=version_key)
    by = {(c.vllm, c.speculators): c for c in cells}
    lines = [
        "# Compatibility: speculators on each vLLM release",
        "",
        "Generated by `python bench/matrix.py` from real runs (do not edit by hand): each vLLM",
        "release really installed from its `tests/e2e/constraints-vllm-X.txt` (CPU machine, the CUDA",
        "build of torch from PyPI, imported only), each speculators release installed `--no-deps`",
        "into a venv that sees it; then `patch-speculators --vllm-version X` (apply: verify and",
        "rehearse, commit or restore), `rehearse` on what apply left, and `rollback`, checked",
        "RECORD-exact afterwards. A cell gives each command's final line and exit code (apply: 0",
        "patched and rehearsed, 1 a check failed or the rehearsal could not run; rehearse: 0 pass, 1",
        "fail, 2 cannot run) and the rules apply recorded.",
        "",
        f"Generated {when} with vllm-shim-patch at commit {commit}.",
        "",
        "| vLLM | " + " | ".join(f"speculators {s}" for s in specs) + " |",
        "|---|" + "---|" * len(specs),
    ]
    for rel in releases:
        row = [render_cell(by[(rel, s)]) if (rel, s) in by else "not run" for s in specs]
        lines.append(f"| {rel} | " + " | ".join(row) + " |")
    lines += ["", "Wall times on this machine (2 cores, shared):", "",
              "| vLLM | venv (build or reuse) | " + " | ".join(f"{s}: apply / rehearse / rollback" for s in specs) + " |",
              "|---|---|" + "---|" * len(specs)]
    for rel in releases:
        row = []
        for s in specs:
            c = by.get((rel, s))
            row.append(f"{c.apply.seconds:.0f} s / {c.rehearse.seconds:.0f} s / {c.rollback.seconds:.0f} s"
                       if c and c.apply and c.rehearse and c.rollback else "")
        lines.append(f"| {rel} | {builds.get(rel, 0):.0f} s | " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def write(out: Path, json_out: Path | None, cells: list[Cell], builds: dict[str, float], specs: list[str],
          when: str, commit: str) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render(cells, builds, specs, when, commit))
    if json_out:
        json_out.write_text(json.dumps({"generated": when, "commit": commit, "builds_s": builds,
                                        "cells": [asdict(c) for c in cells]}, indent=2) + "\n")


def load_cells(path: Path) -> tuple[str, str, dict[str, float], list[Cell]]:
    """A --json-out file's date, commit, build seconds and cells."""
    data = json.loads(path.read_text())
    cells = []
    for raw in data["cells"]:
        steps = {k: Step(**raw[k]) if raw.get(k) else None for k in ("apply", "rehearse", "rollback")}
        cells.append(Cell(**{**raw, **steps}))
    return data["generated"], data["commit"], data["builds_s"], cells


def merge(paths: list[Path], out: Path, json_out: Path | None, specs: list[str]) -> int:
    runs = [load_cells(p) for p in paths]
    by: dict[tuple[str, str], Cell] = {}
    builds: dict[str, float] = {}
    for _, _, run_builds, cells in runs:
        builds.update(run_builds)
        # A release is taken whole from the last run that has it, never mixed from two.
        releases = {c.vllm for c in cells}
        by = {key: c for key, c in by.items() if key[0] not in releases}
        by.update({(c.vllm, c.speculators): c for c in cells})
    when = ", ".join(sorted({w for w, _, _, _ in runs}))
    commit = ", ".join(sorted({c for _, c, _, _ in runs}))
    cells = list(by.values())
    write(out, json_out, cells, builds, specs, when, commit)
    log(f"wrote {out} from {len(paths)} runs ({len(cells)} cells)")
    return 0 if all(c.record_exact for c in cells) else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vllm", action="append", metavar="X", help="a release (repeatable)")
    ap.add_argument("--all", action="store_true", help="every release 0.12.0..0.33.0 on the index")
    ap.add_argument("--speculators", action="append", metavar="V",
                    help=f"a speculators release (repeatable; default: {', '.join(realdata.SPECULATORS)})")
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "compatibility.md")
    ap.add_argument("--json-out", type=Path, default=None,
                    help="also write the raw results (argv, exit codes, stderr tails) as JSON")
    ap.add_argument("--merge", nargs="+", type=Path, metavar="JSON",
                    help="write the table from these --json-out files; run nothing")
    args = ap.parse_args()
    if args.merge:
        if args.vllm or args.all:
            ap.error("--merge runs nothing: leave out --vllm and --all")
        return merge(args.merge, args.out, args.json_out, args.speculators or list(realdata.SPECULATORS))
    releases = index_releases() if args.all else (args.vllm or constrained_releases())
    specs = args.speculators or list(realdata.SPECULATORS)
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    commit = git_commit()
    cells: list[Cell] = []
    builds: dict[str, float] = {}
    for rel in releases:
        try:
            env_python, builds[rel] = release_python(rel)
        except RuntimeError as exc:
            log(str(exc))
            continue
        log(f"vLLM {rel}: venv {env_python.parent.parent} ({builds[rel]:.0f} s)")
        for spec in specs:
            cell = run_cell(rel, env_python, spec)
            assert cell.apply and cell.rehearse
            log(f"vLLM {rel} x speculators {spec}: apply {cell.apply.rc}, rehearse {cell.rehearse.rc}, "
                f"RECORD-exact {cell.record_exact} ({cell.apply.seconds:.0f}+{cell.rehearse.seconds:.0f} s)")
            cells.append(cell)
        # After every release, so a run stopped part-way keeps the rows it measured.
        write(args.out, args.json_out, cells, builds, specs, when, commit)
    write(args.out, args.json_out, cells, builds, specs, when, commit)
    log(f"wrote {args.out}" + (f" and {args.json_out}" if args.json_out else ""))
    return 0 if all(c.record_exact for c in cells) else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Benchmark: start-up of `patch-speculators --help` and `status`, whole processes.

    python bench/bench_startup.py [--runs N]

Timed (wall clock, a warm-up run first, then N runs round-robin), all with this interpreter:

  help            patch-speculators --help
  import-click    python -c "import click"       (the floor for a click CLI)
  bare-python     python -c pass                 (the interpreter alone)
  status          patch-speculators --python <bench venv> --state-dir <empty> status   (not tracked)
  status-patched  the same on a throwaway copy of the bench venv patched once (--no-verify)

Printed: medians, best, and the ratio help / import-click (target <= 1.5x). Then, not
asserted: which heavy modules `python -X importtime -m vllm_shim_patch ...` loads for --help
and for both status runs; libcst, git (GitPython, and its gitdb) and yaml must not appear.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _benchlib as bl

FORBIDDEN = {"libcst": "libcst", "git": "git (GitPython)", "gitdb": "gitdb (GitPython's)", "yaml": "yaml"}


def forbidden_imports(args: list[str], label: str) -> bool:
    """Run `python -X importtime -m vllm_shim_patch ARGS`; print which forbidden modules load."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "vllm_shim_patch", *args],
                          env=bl.tool_env(), capture_output=True, text=True, check=False)
    mods = bl.importtime_modules(proc.stderr)
    if proc.returncode != 0 or not mods:
        print(f"  {label}: exit {proc.returncode}; {proc.stderr.strip()[-300:]}")
        return False
    found = {top: sorted(m for m in mods if m == top or m.startswith(top + ".")) for top in FORBIDDEN}
    verdicts = []
    for top, hits in found.items():
        verdicts.append(f"{FORBIDDEN[top]}: {'IMPORTED (' + str(len(hits)) + ' modules)' if hits else 'absent'}")
    ok = not any(found.values())
    print(f"  {label}: {'ok' if ok else 'NOT OK'}: {len(mods)} modules imported; " + ", ".join(verdicts))
    heavy = ", ".join(f"{name} {us / 1000:.0f} ms" for us, name in bl.importtime_top(proc.stderr, 4))
    print(f"      heaviest top-level imports: {heavy}")
    return ok


def main() -> int:
    args = bl.start("bench_startup", __doc__)
    venv = bl.speculators_venv()
    target_py = str(bl.venv_python(venv))
    ours = bl.ours_command()
    print(f"# ours: {' '.join(ours)}; bench venv: {venv}")

    before = bl.snapshot(venv)
    scratch = Path(tempfile.mkdtemp(prefix="vsp-bench-startup-"))
    try:
        # A throwaway copy of the bench venv, patched once, so `status` has an overlay to read.
        copy = scratch / "patched-venv"
        shutil.copytree(venv, copy, symlinks=True)
        copy_py = str(bl.venv_python(copy))
        state = scratch / "state"
        proc = subprocess.run([*ours, "--python", copy_py, "--state-dir", str(state), "--vllm-version", "0.17",
                               "--no-verify", "-q"], env=bl.tool_env(), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, check=False)
        if proc.returncode != 0:
            bl.die(f"patching the throwaway copy failed:\n{proc.stdout}")

        contenders = [
            bl.Contender("help", [*ours, "--help"]),
            bl.Contender("import-click", [sys.executable, "-c", "import click"]),
            bl.Contender("bare-python", [sys.executable, "-c", "pass"]),
            bl.Contender("status", [*ours, "--python", target_py, "--state-dir", "{fresh}", "status"],
                         fresh_dir=True),
            bl.Contender("status-patched", [*ours, "--python", copy_py, "--state-dir", str(state), "status"]),
        ]
        for c in contenders:
            c.cwd = str(scratch)
            print(f"# {c.name}: {' '.join(c.cmd)}")
        for c in contenders:  # warm-up, and show what the status runs say
            out = bl.run_captured(c, scratch)
            if out.returncode != 0:
                bl.fail(f"{c.name} exited {out.returncode}: {out.stderr.strip()[-500:]}")
            if c.name.startswith("status"):
                print(f"  {c.name} says: {(out.stdout.strip() or out.stderr.strip()).splitlines()[0][:150]}")

        print(f"\n## {args.runs} timed runs per contender (round-robin)")
        bl.measure(contenders, args.runs, scratch)
        help_c, click_c, bare_c = contenders[0], contenders[1], contenders[2]
        bl.print_table(contenders, click_c, "click")
        ratio = help_c.median / click_c.median
        print(f"\nhelp vs import click: {ratio:.2f}x  (target <= 1.50x: {'meets' if ratio <= 1.5 else 'MISSES'})")
        print(f"help minus import click: {(help_c.median - click_c.median) * 1000:.1f} ms; "
              f"import click minus bare python: {(click_c.median - bare_c.median) * 1000:.1f} ms")

        print("\n## imports (python -X importtime -m vllm_shim_patch ...; libcst, git, yaml must be absent)")
        empty = scratch / "empty-state"
        empty.mkdir()
        forbidden_imports(["--help"], "--help")
        forbidden_imports(["--python", target_py, "--state-dir", str(empty), "status"], "status (not tracked)")
        forbidden_imports(["--python", copy_py, "--state-dir", str(state), "status"], "status (patched)")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0 if bl.venv_unchanged(before, venv) else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Benchmark: the dry run on the real speculators 0.3.0, whole processes, side by side.

    python bench/bench_dryrun.py [--runs N] [--no-libcst-cli] [--no-bowler-builtin] [--quiet-diffs]
                                 [--also NAME=<another build's patch-speculators>]

Contenders, each a whole process timed by wall clock (a warm-up run first, whose output is
checked; then N runs, round-robin so changing machine load hits every contender alike):

  ours            patch-speculators --python <venv>/bin/python --vllm-version 0.17 --dry-run
                  --state-dir <fresh empty folder>, VSP_CACHE_DIR one folder for all its runs (the
                  plan the warm-up left is read: a user's dry run after an earlier one or an apply)
  ours, empty cache
                  the same with a new empty VSP_CACHE_DIR every run (a first run on a new machine)
  bowler          bench/bowler_edits.py (Bowler 0.9.0 queries + .modify() callbacks), diff only
  bowler-builtin  bench/bowler_edits.py --mode builtin (Bowler's own argument modifiers only;
                  they cannot express the edits exactly, see that file), diff only
  libcst-cli      python -m libcst.tool codemod -x --no-format --unified-diff=3 --hide-progress
                  libcst_codemod.speculators_vllm017.SpeculatorsVllm017 <package dir>

The target venv (real speculators 0.3.0, --no-deps, no vLLM: the tool's rules are then chosen
by --vllm-version alone) and the Bowler venv are cached under ~/.cache/vllm-shim-patch/bench.
Nothing is written to the venv: its files are hashed before and after, and the run fails if
anything changed. A benchmark, not a test: the targets are printed, never asserted.
"""

from __future__ import annotations

import argparse
import difflib
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _benchlib as bl

PACKAGE = "speculators"
LIBCST_COMMAND = "libcst_codemod.speculators_vllm017.SpeculatorsVllm017"


def main() -> int:
    def own_args(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--libcst-jobs", type=int, default=None,
                            help="-j for the libcst codemod CLI (default: its own, the number of cores)")
        parser.add_argument("--no-bowler-builtin", action="store_true",
                            help="skip the bowler-builtin contender")
        parser.add_argument("--no-libcst-cli", action="store_true",
                            help="skip the libcst-cli contender (seconds a run: for quick iterations)")
        parser.add_argument("--quiet-diffs", action="store_true", help="do not print the diffs")
        parser.add_argument("--also", action="append", default=[], metavar="NAME=SCRIPT",
                            help="one more contender: another build of the tool's patch-speculators "
                                 "(e.g. an earlier commit installed in its own venv), same arguments")

    args = bl.start("bench_dryrun", __doc__, own_args)
    venv = bl.speculators_venv()
    bowler = bl.bowler_venv()
    target_py = bl.venv_python(venv)
    site = bl.site_packages(target_py)
    pkg = site / PACKAGE
    if not (pkg / "__init__.py").is_file():
        bl.die(f"{pkg} is not an installed package")
    n_files = sum(1 for _ in pkg.rglob("*.py"))
    print(f"# target: {venv} ({PACKAGE} {bl.SPECULATORS_VERSION}, {n_files} .py files, no vLLM)")
    print(f"# bowler: {bowler} ({bl.BOWLER_REQUIREMENT})")

    libcst_cmd = [sys.executable, "-m", "libcst.tool", "codemod", "-x", "--no-format",
                  "--unified-diff=3", "--hide-progress"]
    if args.libcst_jobs is not None:
        libcst_cmd.append(f"--jobs={args.libcst_jobs}")
    scratch = Path(tempfile.mkdtemp(prefix="vsp-bench-dryrun-"))
    ours_cmd = [*bl.ours_command(), "--python", str(target_py), "--vllm-version", "0.17", "--dry-run",
                "--state-dir", "{fresh}"]
    contenders = [
        # The tool's cache (VSP_CACHE_DIR) one folder for all of ours' runs, as on a user's machine:
        # the warm-up leaves the plan there and every timed run (a new state dir each) may read it.
        bl.Contender("ours", ours_cmd, env=bl.tool_env(VSP_CACHE_DIR=str(scratch / "ours-cache")),
                     fresh_dir=True, ok_codes=(0, 1)),  # 1: the diff is printed, but a site is left for a human
        # A first run on a new machine: a new, empty cache folder every run.
        bl.Contender("ours, empty cache", ours_cmd, env=bl.tool_env(VSP_CACHE_DIR="{cache}"), fresh_dir=True,
                     fresh_cache=True, ok_codes=(0, 1)),
        bl.Contender("bowler", [str(bl.venv_python(bowler)), str(bl.BENCH / "bowler_edits.py"), str(pkg)]),
        bl.Contender("bowler-builtin", [str(bl.venv_python(bowler)), str(bl.BENCH / "bowler_edits.py"),
                                        str(pkg), "--mode", "builtin"]),
        bl.Contender("libcst-cli", [*libcst_cmd, LIBCST_COMMAND, str(pkg)],
                     env=bl.tool_env(PYTHONPATH=str(bl.BENCH))),
    ]
    for extra in args.also:
        name, sep, script = extra.partition("=")
        if not sep or not name or not Path(script).is_file():
            bl.die(f"--also {extra!r}: give NAME=PATH of a patch-speculators script")
        contenders.insert(2, bl.Contender(name, [script, *ours_cmd[1:]], fresh_dir=True, ok_codes=(0, 1),
                                          env=bl.tool_env(VSP_CACHE_DIR=str(scratch / f"{name}-cache"))))
        # Its first run too (the headline of issue 41 is ours, empty cache, against Bowler).
        contenders.insert(3, bl.Contender(f"{name}, empty cache", [script, *ours_cmd[1:]], fresh_dir=True,
                                          fresh_cache=True, ok_codes=(0, 1), env=bl.tool_env(VSP_CACHE_DIR="{cache}")))
    if args.no_bowler_builtin:
        contenders = [c for c in contenders if c.name != "bowler-builtin"]
    if args.no_libcst_cli:
        contenders = [c for c in contenders if c.name != "libcst-cli"]
    ours = contenders[0]
    bowler_c = next(c for c in contenders if c.name == "bowler")

    before = bl.snapshot(venv)
    try:
        for c in contenders:
            c.cwd = str(scratch)  # no config file of the repository (e.g. .libcst.codemod.yaml) applies
        for c in contenders:
            print(f"# {c.name}: {' '.join(c.cmd)}")

        # Warm-up (byte-code caches, page cache) and the check of what each contender produces.
        print("\n## warm-up run and equivalence check")
        results = {}
        for c in contenders:
            out = bl.warm_up(c, scratch)  # an exit outside ok_codes, or no output: the bench fails
            if out.returncode != 0:
                print(f"note: {c.name} exited {out.returncode} (its diff is still compared and timed)")
            try:
                results[c.name] = bl.patched_files(out.stdout, site, PACKAGE)
            except (ValueError, OSError) as exc:
                print(out.stdout[-4000:], file=sys.stderr)
                bl.fail(f"cannot apply the diff {c.name} printed: {exc}")
            if not results[c.name]:
                print(out.stdout[-4000:], file=sys.stderr)
                bl.fail(f"{c.name} printed no diff of any file in its warm-up run")
            if c is ours:
                summary = [line for line in out.stderr.splitlines() if line.strip()]
                print(f"ours (stderr): {' | '.join(summary[-3:])}")
            if not args.quiet_diffs and c.name in ("ours", "bowler"):
                print(f"--- diff printed by {c.name} ---")
                print(out.stdout.rstrip())
                print(f"--- end of the diff printed by {c.name} ---")
        reference = results["ours"]
        print(f"ours changes {len(reference)} file(s): {', '.join(sorted(reference)) or 'none'}")
        for c in contenders[1:]:
            got = results[c.name]
            if got == reference:
                print(f"{c.name}: same resulting files as ours (diff applied to the installed files)")
                continue
            print(f"{c.name}: NOT the same result as ours; result of ours -> result of {c.name}:")
            for rel in sorted(set(got) | set(reference)):
                a = reference.get(rel, (site / rel).read_text(encoding="utf-8"))
                b = got.get(rel, (site / rel).read_text(encoding="utf-8"))
                sys.stdout.writelines(
                    "    " + line for line in difflib.unified_diff(a.splitlines(True), b.splitlines(True),
                                                             f"ours/{rel}", f"{c.name}/{rel}", n=1))
        print("note: Bowler's own argument modifiers cannot express these edits exactly (bowler-builtin "
              "shows the result): remove_argument re-renders the argument list and loses the trailing "
              "comma; add_argument never adds a keyword argument at a call site, and its value is a bare "
              "Name leaf, so block_size=<the call's vllm_config>.cache_config.block_size cannot be built. "
              "The `bowler` contender (the headline) is the closest equivalent: the same "
              "select_function() queries with .modify() callbacks editing the fissix tree; it matches by "
              "bare name, not through imports. See bench/bowler_edits.py.")

        print(f"\n## {args.runs} timed runs per contender (round-robin)")
        bl.measure(contenders, args.runs, scratch)
        bl.print_table(contenders, ours, "ours")
        ratio = ours.median / bowler_c.median
        verdict = "meets" if ratio <= 1.0 else "MISSES"
        print(f"\nours vs Bowler: {ratio:.2f}x  (ours median / Bowler median; target <= 1.00x: {verdict})")
        cold = next(c for c in contenders if c.name == "ours, empty cache")
        ratio = cold.median / bowler_c.median
        print(f"ours with an empty cache (a first run) vs Bowler: {ratio:.2f}x  "
              f"(target <= 1.00x: {'meets' if ratio <= 1.0 else 'MISSES'})")
        for c in contenders[1:]:
            if c.name not in ("bowler", "bowler-builtin", "libcst-cli", "ours, empty cache"):
                mine = cold if c.name.endswith(", empty cache") else ours  # like against like
                print(f"{c.name} vs Bowler: {c.median / bowler_c.median:.2f}x; {mine.name} vs {c.name}: "
                      f"{mine.median / c.median:.2f}x")
        if "bowler-builtin" in results:
            b2 = next(c for c in contenders if c.name == "bowler-builtin")
            print(f"ours vs Bowler (built-in modifiers only): {ours.median / b2.median:.2f}x")
        lc = next((c for c in contenders if c.name == "libcst-cli"), None)
        if lc is not None:
            print(f"ours vs libcst codemod CLI: {ours.median / lc.median:.2f}x")

        written = sorted(str(p.relative_to(scratch)) for p in scratch.glob("fresh-*/**/*"))  # state dirs
        print(f"state dirs: {'nothing written by the dry runs' if not written else 'WRITTEN: ' + ', '.join(written[:5])}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    return 0 if bl.venv_unchanged(before, venv) else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Where the dry run's time goes: a phase breakdown of one `patch-speculators --dry-run`.

    python bench/profile_dryrun.py [--runs N] [--cprofile FILE]

Runs the CLI in this process (the same code path as the console script), with timing wrappers
around a few functions of vllm_shim_patch and libcst (nothing in src/ is edited); the
interpreter's own start-up is measured separately (`python -c pass`). Each phase is the median
over N runs, each run in a fresh process (imports are part of the cost). With --cprofile, one
extra run is written as a cProfile file for `python -m pstats FILE`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _benchlib as bl

# The child: time imports, then run the CLI with wrappers, print a JSON of phase totals.
CHILD = r"""
import json, sys, time, functools, io, contextlib
T = {}
t_start = time.perf_counter()

def add(name, dt):
    T[name] = T.get(name, 0.0) + dt

def timing(fn, name):
    @functools.wraps(fn)
    def timed(*a, **k):
        t = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            add(name, time.perf_counter() - t)
    return timed

def wrap(owner, attr, name):
    setattr(owner, attr, timing(getattr(owner, attr), name))

def wrap_cached(owner, attr, name):
    prop = functools.cached_property(timing(owner.__dict__[attr].func, name))
    prop.__set_name__(owner, attr)
    setattr(owner, attr, prop)

t = time.perf_counter(); import vllm_shim_patch.cli as cli; add("import cli (click + tool modules)", time.perf_counter() - t)
t = time.perf_counter(); import libcst; add("import libcst", time.perf_counter() - t)
t = time.perf_counter(); import libcst.metadata; add("import libcst.metadata", time.perf_counter() - t)
t = time.perf_counter()
import vllm_shim_patch.rewrite.engine, vllm_shim_patch.rewrite.plan, vllm_shim_patch.rules
import vllm_shim_patch.report.diff, vllm_shim_patch.report.plan
import vllm_shim_patch.target, vllm_shim_patch.overlay.repo, vllm_shim_patch.commands.apply
add("import the other tool modules", time.perf_counter() - t)
t = time.perf_counter(); import yaml; add("import yaml", time.perf_counter() - t)

import subprocess
from libcst.metadata import wrapper as mw
from vllm_shim_patch.commands.services import InstalledVllm, PackageFiles
from vllm_shim_patch.rewrite import engine
from vllm_shim_patch.rules import loader

wrap(subprocess.Popen, "communicate", "subprocess: wait for the target interpreter")
wrap(loader, "load_pack", "rules: load and validate the bundled YAML")
wrap_cached(InstalledVllm, "guard", "ctx.vllm.guard (vLLM signatures for the guard)")
wrap_cached(PackageFiles, "overlay", "ctx.files.overlay (open the overlay)")
wrap(PackageFiles, "originals", "ctx.files.originals (original bytes)")
wrap(engine.Engine, "transform", "engine.transform, all files (incl. below)")
wrap(engine.cst, "parse_module", "  libcst.parse_module")
wrap(engine, "import_names", "  callee names from the imports (rewrite/names.py, ast)")
wrap(engine, "_provider_names", "  callee names by QualifiedNameProvider (where names.py declines)")
from vllm_shim_patch.rewrite import positions as positions_module
wrap(positions_module, "positions", "  positions (rewrite/positions.py), every module asked")
engine.positions = positions_module.positions
wrap(engine._ScopedPass, "run", "  scoped rules (in: regions), incl. their positions")
wrap(engine._ScopedPass, "_drop_imports", "    the imports they drop (one RemoveImportsVisitor pass a file)")
wrap(mw.MetadataWrapper, "visit", "  MetadataWrapper.visit (a codemod asking more metadata)")
from vllm_shim_patch.rewrite import plancache
wrap(plancache, "plan_key", "plan cache: the key (a digest of every input)")
wrap(plancache.PlanCache, "put", "plan cache: store the plan")
from vllm_shim_patch.rewrite import grammar
# The changed files compiled by the target interpreter, one process started before the engine
# runs: this is what is left to wait for after it (also in the subprocess line).
wrap(grammar.TargetGrammar, "check", "compile check in the target (one process, all changed files)")

counts = {"parsed": 0}
orig = engine.cst.parse_module
def counting(*a, **k):
    counts["parsed"] += 1
    return orig(*a, **k)
engine.cst.parse_module = counting

out, err = io.StringIO(), io.StringIO()
sys.argv = ["patch-speculators"] + sys.argv[1:]
t = time.perf_counter()
with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    try:
        cli.main()
    except SystemExit as e:
        code = e.code
add("cli.main() total", time.perf_counter() - t)
T["process total (after interpreter start)"] = time.perf_counter() - t_start
T["_files_parsed"] = counts["parsed"]
T["_exit"] = code
print(json.dumps(T))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--cprofile", metavar="FILE", help="also write one run's cProfile to FILE")
    args = parser.parse_args()

    venv = bl.speculators_venv()
    py = str(bl.venv_python(venv))
    print(f"# profile_dryrun: {bl.machine_line()}")
    print(f"# vllm-shim-patch at {bl.git_rev()}; target {venv}")
    runs: list[dict] = []
    startup: list[float] = []
    with tempfile.TemporaryDirectory(prefix="vsp-bench-prof-") as tmp:
        tool_args = ["--python", py, "--vllm-version", "0.17", "--dry-run"]
        # Every run with a new, empty VSP_CACHE_DIR: the dry run would read the plan an earlier run
        # left there, and the engine's phases are what this breaks down.
        subprocess.run([sys.executable, "-c", CHILD, *tool_args, "--state-dir", f"{tmp}/warm"],
                       env=bl.tool_env(VSP_CACHE_DIR=f"{tmp}/cache-warm"), stdout=subprocess.DEVNULL,
                       check=False)  # warm-up
        for i in range(args.runs):
            proc = subprocess.run([sys.executable, "-c", CHILD, *tool_args, "--state-dir", f"{tmp}/s{i}"],
                                  env=bl.tool_env(VSP_CACHE_DIR=f"{tmp}/cache-{i}"), stdout=subprocess.PIPE,
                                  text=True, check=True)
            runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
            c = bl.Contender("python -c pass", [sys.executable, "-c", "pass"])
            startup.append(bl.time_once(c, Path(tmp)))
        if args.cprofile:
            subprocess.run([sys.executable, "-m", "cProfile", "-o", args.cprofile,
                            "-m", "vllm_shim_patch", *tool_args, "--state-dir", f"{tmp}/prof"],
                           env=bl.tool_env(VSP_CACHE_DIR=f"{tmp}/cache-prof"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           check=False)
            print(f"# cProfile written to {args.cprofile} (it slows libcst's visitors ~2x)")

    print(f"\nmedian of {args.runs} runs (each a fresh process), ms:")
    print(f"  {'interpreter start-up (python -c pass)':<58} {statistics.median(startup) * 1000:8.1f}")
    for key in runs[0]:
        if key.startswith("_"):
            continue
        vals = [r.get(key, 0.0) for r in runs]
        print(f"  {key:<58} {statistics.median(vals) * 1000:8.1f}")
    print(f"  files parsed by libcst: {runs[0]['_files_parsed']} (exit {runs[0]['_exit']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Benchmark: verification and the rehearsal on the real vLLM 0.16.0 install, vs one import.

    python bench/bench_rehearse.py [--runs N] [--only import,rehearse,...]

The floor is what the target pays anyway: importing speculators' generator module (which imports
vLLM). Timed, whole processes, a warm-up run first, then N runs round-robin:

  import        <target python> -c "import speculators.data_generation.vllm_hidden_states_generator"
  two-process   the verification as it was: _remote/import_check.py, then _remote/signature_probe.py
                (each imports vLLM), the same modules and callees
  verify        patch-speculators verify            (imports + live binding, one target process)
  rehearse      patch-speculators rehearse          (speculators' generator on the parity workload:
                                                     6 calls, 40 sequences, each checked)
  quick         patch-speculators rehearse --quick  (the two short calls)
  kimi-k2.5     patch-speculators rehearse --arch kimi-k2.5  (the parity workload on a tiny Kimi-K2.5:
                                                     MLA, experts, the multimodal wrapper)
  tp2           patch-speculators rehearse --tensor-parallel-size 2  (the parity workload through
                                                     vLLM's MultiprocExecutor: two worker processes)
  session       _remote/session.py with all three   (exactly what apply runs after writing)

Targets (issue 17): rehearse within 1.5x of import, quick within 1.0x, session within 2x; (issue
26) tp2 within 2.5x of rehearse, printed as its own ratio.

The target is a throwaway venv holding the real speculators 0.3.0, patched once by the tool
(--no-verify), that sees the cached real vLLM 0.16.0 (tests/e2e/build_env.py) through a .pth
file. Printed: medians, best, and each median / import's median.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _benchlib as bl

GENERATOR = "speculators.data_generation.vllm_hidden_states_generator"
MODULES = ["speculators.data_generation.custom_worker", GENERATOR]
CALLEES = ["vllm.config.CacheConfig", "vllm.config.SchedulerConfig",
           "vllm.v1.core.kv_cache_utils.get_kv_cache_config_from_groups", "vllm.v1.core.sched.scheduler.Scheduler"]


def vllm_site() -> tuple[Path, Path]:
    proc = subprocess.run([sys.executable, str(bl.REPO / "tests" / "e2e" / "build_env.py"), "--print-path"],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        bl.die(f"cannot build the real vLLM venv: {proc.stderr[-2000:]}")
    return bl.site_packages(Path(proc.stdout.strip().splitlines()[-1])), Path(proc.stdout.strip().splitlines()[-1])


def main() -> int:
    args = bl.start("bench_rehearse", __doc__, lambda p: p.add_argument(
        "--only", metavar="NAMES", help="comma-separated contenders to run (default: all; import always runs, "
        "every ratio is to it)"))
    site, vllm_python = vllm_site()
    ours = bl.ours_command()
    remote = bl.REPO / "src" / "vllm_shim_patch" / "_remote"
    with tempfile.TemporaryDirectory(prefix="vsp-bench-rehearse-") as tmp:
        root = Path(tmp)
        venv = root / "venv"
        subprocess.run([str(vllm_python), "-m", "venv", "--without-pip", str(venv)], check=True)
        target = bl.venv_python(venv)
        bl._pip(["--python", str(target), "install", "--quiet", "--no-deps", str(bl.speculators_wheel())])
        (bl.site_packages(target) / "zz-vllm.pth").write_text(f"{site}\n")
        state = root / "state"
        base = [*ours, "--python", str(target), "--state-dir", str(state)]
        patched = subprocess.run([*base, "--no-verify"], capture_output=True, text=True, env=bl.tool_env())
        if patched.returncode != 0:
            bl.die(f"patching the bench venv failed: {patched.stderr}")
        (root / "imports.json").write_text(json.dumps({"modules": MODULES, "own": "speculators"}))
        (root / "names.json").write_text(json.dumps(CALLEES))
        from vllm_shim_patch.analysis.rehearse import request

        (root / "session.json").write_text(json.dumps({
            "imports": {"modules": MODULES, "own": "speculators"}, "signatures": CALLEES,
            "rehearse": request().to_json()}))
        env = bl.tool_env(PYTHONDONTWRITEBYTECODE="1")
        contenders = [
            bl.Contender("import", [str(target), "-c", f"import {GENERATOR}"], env=env, cwd=tmp),
            bl.Contender("two-process", ["sh", "-c",
                                         f"{target} {remote / 'import_check.py'} < imports.json && "
                                         f"{target} {remote / 'signature_probe.py'} < names.json"], env=env, cwd=tmp),
            bl.Contender("verify", [*base, "verify"]),
            bl.Contender("rehearse", [*base, "rehearse"]),
            bl.Contender("quick", [*base, "rehearse", "--quick"]),
            bl.Contender("kimi-k2.5", [*base, "rehearse", "--arch", "kimi-k2.5"]),
            bl.Contender("tp2", [*base, "rehearse", "--tensor-parallel-size", "2"]),
            bl.Contender("session", ["sh", "-c", f"{target} {remote / 'session.py'} < session.json"], env=env, cwd=tmp),
        ]
        if args.only:
            wanted = {"import", *args.only.split(",")}
            unknown = wanted - {c.name for c in contenders}
            if unknown:
                bl.die(f"--only: no contender {sorted(unknown)[0]!r} (known: {', '.join(c.name for c in contenders)})")
            contenders = [c for c in contenders if c.name in wanted]
        print(f"# target: {target} (speculators 0.3.0 patched, vLLM 0.16.0 from {site})")
        for c in contenders:
            out = bl.run_captured(c, root)
            if out.returncode != 0:
                bl.fail(f"{c.name} warm-up exited {out.returncode}: {out.stderr[-2000:]}")
            if c.name == "session":
                answer = json.loads(out.stdout)
                print(f"  session warm-up: rehearsal {answer['rehearse']['outcome']}, "
                      f"imports {[i['status'] for i in answer['imports']]}")
        bl.measure(contenders, args.runs, root)
        bl.print_table(contenders, contenders[0], "import")
        named = {c.name: c for c in contenders}
        if "rehearse" in named and "tp2" in named:
            ratio = named["tp2"].median / named["rehearse"].median
            print(f"  tensor parallel 2 / 1: {ratio:.2f}x the median (target at most 2.5x: "
                  f"{'meets' if ratio <= 2.5 else 'misses'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

#!/usr/bin/env python3
"""The audit against pyright: speed (whole process, cold start, side by side) and findings.

    python bench/bench_audit_pyright.py [--runs N] [--vllm 0.16.0]

Both check speculators 0.3.0's vLLM-facing files (the three modules of
`speculators/data_generation/` that import vLLM) against the same vLLM source (the `.py` files
of the real vLLM wheel, from `tests/realdata.py`). Contenders, each a fresh process per run:

- `audit`: `patch-speculators --python <venv> --vllm-source <src> --state-dir <fresh> audit --json`
  (the whole package, every use of vLLM, before and after the bundled rules);
- `audit --no-rules`: the same without planning the rules (the package as installed: the job
  pyright does);
- each of the two as a user runs it again (the cache folder the warm-up run filled: signatures,
  existence answers, the plan) and with an empty cache (a new VSP_CACHE_DIR per run: a first run
  on a new machine);
- `pyright`: `node <pyright>/index.js -p <project> --outputjson`, the project holding a copy of
  the installed package (pyright checks nothing under site-packages) and listing the three files,
  with `extraPaths` = [vLLM source, the copy].

pyright is installed with `npm install pyright@PYRIGHT_VERSION` into the bench cache (never into
the repository or the system). After the timing, the findings are compared: every pyright
diagnostic inside a use of vLLM the audit found (same file, a line the use spans) against the
audit's verdict on that use, plus the audit's mismatches pyright does not report.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _benchlib as bl

PYRIGHT_VERSION = "1.1.408"
FILES = ("speculators/data_generation/vllm_hidden_states_generator.py",
         "speculators/data_generation/custom_worker.py",
         "speculators/data_generation/config_generator.py")


def pyright_js() -> Path:
    """pyright from the npm registry, cached under the bench cache."""
    with bl.cache_lock():
        root = bl.CACHE / f"pyright-{PYRIGHT_VERSION}"
        js = root / "node_modules" / "pyright" / "index.js"
        if not js.is_file():
            if shutil.which("npm") is None:
                bl.die("npm is not installed (pyright is a node package)")
            print(f"setting up {root} ...", file=sys.stderr)
            root.mkdir(parents=True, exist_ok=True)
            subprocess.run(["npm", "install", "--prefix", str(root), "--no-audit", "--no-fund", "--silent",
                            f"pyright@{PYRIGHT_VERSION}"], check=True)
        return js


def vllm_source(version: str) -> Path:
    proc = subprocess.run([sys.executable, str(bl.REPO / "tests" / "realdata.py"), "vllm", version],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        bl.die(f"tests/realdata.py vllm {version} failed: {proc.stderr.strip()[-300:]}")
    return Path(proc.stdout.strip().splitlines()[-1])


def pyright_project(scratch: Path, site: Path, src: Path) -> tuple[Path, Path]:
    """A project folder holding a copy of the installed package (pyright treats files under
    site-packages as library code and checks none of them)."""
    project = scratch / "pyright-project"
    pkg = project / "pkg"
    shutil.copytree(site / "speculators", pkg / "speculators")
    config = {
        "include": [f"pkg/{f}" for f in FILES],
        "extraPaths": [str(src), "pkg"],
        "pythonVersion": f"{sys.version_info.major}.{sys.version_info.minor}",
        "typeCheckingMode": "basic",
        "useLibraryCodeForTypes": True,
    }
    (project / "pyrightconfig.json").write_text(json.dumps(config, indent=2))
    return project, pkg


def compare(audit: dict, pyright: dict, site: Path) -> list[str]:
    """Pyright's diagnostics on uses of vLLM next to the audit's verdicts; the lines to print."""
    uses = [u for u in audit["uses"] if u["path"] in FILES]
    spans = {}
    for u in uses:
        spans.setdefault(u["path"], []).append(u)
    lines = []
    agree = pyright_only = unknown = 0
    matched: set[int] = set()
    other = 0
    for d in pyright["generalDiagnostics"]:
        if d["severity"] != "error":
            continue
        rel = Path(d["file"]).resolve().relative_to(site.resolve()).as_posix()
        line = d["range"]["start"]["line"] + 1
        hits = [u for u in spans.get(rel, []) if u["line"] <= line <= u["end_line"]]
        if not hits:
            other += 1
            continue
        # The innermost use that spans the line (a keyword's own line inside a longer call).
        u = min(hits, key=lambda h: (h["end_line"] - h["line"], h["kind"] == "attribute"))
        matched.add(id(u))
        message = d["message"].splitlines()[0]
        verdict = f"{u['status']}" + (f" ({u['reason']})" if u["reason"] else "")
        if u["status"] == "mismatch":
            agree += 1
            tag = "both"
        elif u["status"] == "unknown":
            unknown += 1
            tag = "pyright; audit unknown"
        else:
            pyright_only += 1
            tag = "pyright only"
        lines.append(f"  [{tag}] {rel}:{line}: pyright: {message} | audit {u['kind']} {u['callee']} "
                     f"(line {u['line']}): {verdict}")
    audit_only = [u for u in uses if u["status"] == "mismatch" and id(u) not in matched]
    for u in audit_only:
        lines.append(f"  [audit only] {u['path']}:{u['line']}: {u['kind']} {u['callee']}: {u['reason']}")
    lines.append(f"  on uses of vLLM: {agree} reported by both, {pyright_only} by pyright alone "
                 f"(the audit says ok), {unknown} where the audit says unknown, {len(audit_only)} by the "
                 f"audit alone; {other} pyright errors elsewhere (not about vLLM)")
    return lines


def main() -> None:
    args = bl.start("audit vs pyright", __doc__, lambda p: p.add_argument(
        "--vllm", default="0.16.0", help="the vLLM release whose source both read (default 0.16.0)"))
    venv = bl.speculators_venv()
    python = bl.venv_python(venv)
    site = bl.site_packages(python)
    src = vllm_source(args.vllm)
    js = pyright_js()
    node = shutil.which("node") or bl.die("node is not installed")
    before = bl.snapshot(venv)
    with tempfile.TemporaryDirectory(prefix="vsp-bench-audit-") as tmp:
        scratch = Path(tmp)
        project, copy = pyright_project(scratch, site, src)
        warm_cache = scratch / "warm-cache"
        ours = [*bl.ours_command(), "--python", str(python), "--vllm-source", str(src)]
        # A new cache folder per run (no signature cache, no plan cache), as on a new machine.
        cold = ["env", "VSP_CACHE_DIR={fresh}/cache", *ours, "--state-dir", "{fresh}/state"]
        # The cache the warm-up run filled (a second audit of the same files and vLLM).
        warm = [*ours, "--state-dir", "{fresh}/state"]
        warm_env = bl.tool_env(VSP_CACHE_DIR=str(warm_cache))
        contenders = [
            bl.Contender("audit, empty cache", [*cold, "audit", "--json"], fresh_dir=True, ok_codes=(0, 1)),
            bl.Contender("audit", [*warm, "audit", "--json"], env=warm_env, fresh_dir=True, ok_codes=(0, 1)),
            bl.Contender("audit --no-rules, empty cache", [*cold, "audit", "--no-rules", "--json"], fresh_dir=True,
                         ok_codes=(0, 1)),
            bl.Contender("audit --no-rules", [*warm, "audit", "--no-rules", "--json"], env=warm_env,
                         fresh_dir=True, ok_codes=(0, 1)),
            bl.Contender("pyright", [str(node), str(js), "-p", str(project), "--outputjson"], ok_codes=(0, 1)),
        ]
        # Warm-up (byte-code caches, the OS file cache, the cache of the contenders that keep one); the outputs
        # are the findings compared.
        out = {c.name: bl.run_captured(c, scratch) for c in contenders}
        for name, cap in out.items():
            if cap.returncode not in (0, 1):
                bl.fail(f"{name} exited {cap.returncode}: {cap.stderr.strip()[-400:]}")
        for mode in ("audit", "audit --no-rules"):
            if out[f"{mode}, empty cache"].stdout != out[mode].stdout:
                bl.fail(f"{mode}: the findings with the cache differ from those without")
        print(f"# speculators 0.3.0 ({len(FILES)} vLLM-facing files) against the vLLM {args.vllm} source {src}")
        node_version = subprocess.run([node, '--version'], capture_output=True, text=True, check=False).stdout.strip()
        print(f"# pyright {PYRIGHT_VERSION} on node {node_version}")
        bl.measure(contenders, args.runs, scratch)
        print(f"\nwhole process, {args.runs} runs each, round-robin:")
        pyright = contenders[-1]
        bl.print_table(contenders, pyright, "pyright")
        for c in contenders[:-1]:
            print(f"  pyright / {c.name}: {pyright.median / c.median:.1f}x (target: at least 10x)")
        audit = json.loads(out["audit --no-rules, empty cache"].stdout)
        found = json.loads(out["pyright"].stdout)
        print("\nfindings (the package as installed):")
        print("\n".join(compare(audit, found, copy)))
    bl.venv_unchanged(before, venv)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Benchmark: the static signature reader on a real vLLM source, first run vs second run.

    python bench/bench_sigcache.py [--runs N] [--vllm 0.16.0]

Every contender is a whole process that reads the signatures of every vLLM callable and method
speculators 0.3.0 and 0.4.0 use (31 names) from the real vLLM source (`tests/realdata.py`,
cached outside the repository):

  no-cache     StaticSignatures(root): parses the modules it needs (the reader before the cache)
  first-run    StaticSignatures(root, cache_dir=<new empty dir>): the same, plus writing the cache
  second-run   StaticSignatures(root, cache_dir=<dir the warm-up filled>): stats, reads no source
  import-only  python -c "import vllm_shim_patch.signatures": the floor (interpreter + imports)

Printed: best and median per contender, the ratios to second-run, and the reader's own share
(median minus import-only). It checks first that all three answer exactly the same.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import _benchlib as bl
import realdata

CALLABLES = [
    *(f"vllm.config.{c}" for c in ("CacheConfig", "DeviceConfig", "LoadConfig", "ModelConfig",
                                   "ParallelConfig", "SchedulerConfig", "VllmConfig")),
    "vllm.sampling_params.SamplingParams",
    "vllm.utils.hashing.get_hash_fn_by_name",
    *(f"vllm.v1.core.kv_cache_utils.{f}" for f in (
        "_get_kv_cache_groups_uniform_spec", "get_kv_cache_config_from_groups",
        "get_request_block_hasher", "init_none_hash", "unify_hybrid_kv_cache_specs")),
    "vllm.v1.core.sched.scheduler.Scheduler",
    *(f"vllm.v1.core.sched.scheduler.Scheduler.{m}" for m in (
        "add_request", "schedule", "finish_requests")),
    "vllm.v1.executor.multiproc_executor.MultiprocExecutor",
    *(f"vllm.v1.executor.multiproc_executor.MultiprocExecutor.{m}" for m in (
        "collective_rpc", "execute_model", "initialize_from_config", "shutdown", "sample_tokens")),
    "vllm.v1.request.Request",
    "vllm.v1.structured_output.StructuredOutputManager",
    "vllm.distributed.get_pp_group",
    "vllm.distributed.get_tp_group",
    "vllm.model_executor.models.interfaces.supports_eagle3",
    "vllm.sequence.IntermediateTensors",
    "vllm.SamplingParams",
]

READ = """
import json, sys
from vllm_shim_patch.signatures import StaticSignatures
root, cache = sys.argv[1], (sys.argv[2] or None)
src = StaticSignatures(root, cache_dir=cache)
names = json.loads(sys.argv[3])
out = {n: ([[p.name, p.kind, p.required] for p in s.params] if s else src.unknown_reason(n))
       for n, s in src.get_many(names).items()}
print(json.dumps({"answers": out, "parsed": len(src.parsed_modules)}))
"""


def main() -> None:
    args = bl.start("bench_sigcache", __doc__,
                    lambda p: p.add_argument("--vllm", default="0.16.0", help="vLLM release"))
    root = realdata.vllm_source(args.vllm)
    names = json.dumps(CALLABLES)
    with tempfile.TemporaryDirectory(prefix="vsp-sigcache-") as tmp:
        scratch, warm = Path(tmp) / "scratch", Path(tmp) / "warm"
        py = sys.executable
        contenders = [
            bl.Contender("no-cache", [py, "-c", READ, str(root), "", names]),
            bl.Contender("first-run", [py, "-c", READ, str(root), "{fresh}", names], fresh_dir=True),
            bl.Contender("second-run", [py, "-c", READ, str(root), str(warm), names]),
            bl.Contender("import-only", [py, "-c", "import vllm_shim_patch.signatures"]),
        ]
        answers = {}
        for c in contenders[:3]:  # warm-up: fills `warm`, checks the answers agree
            got = bl.run_captured(c, scratch)
            if got.returncode != 0:
                bl.fail(f"{c.name} failed: {got.stderr[-500:]}")
            answers[c.name] = json.loads(got.stdout)
        again = json.loads(bl.run_captured(contenders[2], scratch).stdout)
        if not (answers["no-cache"]["answers"] == answers["first-run"]["answers"]
                == again["answers"]):
            bl.fail("the contenders answer differently")
        known = sum(isinstance(v, list) for v in again["answers"].values())
        print(f"vLLM {args.vllm} source at {root}: {len(CALLABLES)} names, {known} signatures known;"
              f" modules parsed: no-cache {answers['no-cache']['parsed']},"
              f" second-run {again['parsed']}")
        bl.measure(contenders, args.runs, scratch)
        second = contenders[2]
        bl.print_table(contenders, second, "second")
        floor = contenders[3].median
        for c in contenders[:3]:
            print(f"  reader share of {c.name:<10}  {bl.fmt_s(max(c.median - floor, 0.0))}"
                  " (median minus import-only)")
        first = contenders[1]
        print(f"first run / second run: {first.median / second.median:.2f}x whole process;"
              f" {(first.median - floor) / max(second.median - floor, 1e-4):.1f}x the reader's share")


if __name__ == "__main__":
    main()

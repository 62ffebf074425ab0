"""StaticSignatures and its existence checks (`members`: what the audit, the guards and
verification ask) on every vLLM release on the package index from 0.10.0 to 0.33.0 (the newest
when this was written), over every vLLM name, callable and method the real speculators 0.3.0 and
0.4.0 wheels use.

The expectations are facts about vLLM's source, each checked by reading that release's code
(`grep -n "def get_kv_cache_config_from_groups" -A6 ...`): a signature, "missing" where the name
is not in that release, and for speculators' own calls the bind result. A row holds from its
release until the next row of the same callable.

Slow: the first run downloads each release's wheel once and keeps only its `.py` files
(tests/realdata.py, ~15-60 MB each outside the repository).
"""

from __future__ import annotations

import pytest
import realdata
import specuse
from sigcases import render

from vllm_shim_patch.analysis.audit import Checker
from vllm_shim_patch.analysis.calls import CALL, METHOD, CallRecord
from vllm_shim_patch.report.binding import bind_reason, existence_reason
from vllm_shim_patch.signatures import Signature, StaticSignatures
from vllm_shim_patch.signatures.model import Presence

# One worker runs the whole module (pytest -n): its module-scoped fixtures are built once.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("release-matrix")]

RELEASES = [
    "0.10.0", "0.10.1", "0.10.1.1", "0.10.2", "0.11.0", "0.11.1", "0.11.2", "0.12.0", "0.13.0",
    "0.14.0", "0.14.1", "0.15.0", "0.15.1", "0.16.0", "0.17.0", "0.17.1", "0.18.0", "0.18.1",
    "0.19.0", "0.19.1", "0.20.0", "0.20.1", "0.20.2", "0.21.0", "0.22.0", "0.22.1", "0.23.0",
    "0.24.0", "0.25.0", "0.25.1", "0.26.0", "0.27.0", "0.27.1", "0.28.0", "0.29.0", "0.30.0",
    "0.31.0", "0.32.0", "0.33.0",
]  # fmt: skip

KCU = "vllm.v1.core.kv_cache_utils"
SCHED = "vllm.v1.core.sched.scheduler.Scheduler"
EXEC = "vllm.v1.executor.multiproc_executor.MultiprocExecutor"
CONFIGS = ["CacheConfig", "DeviceConfig", "LoadConfig", "ModelConfig", "ParallelConfig",
           "SchedulerConfig", "VllmConfig"]

# The full parameter list (sigcases.render: `=` marks a default, `**x` a catch-all), or
# "missing: <part of the reason>". Methods (SCHED.x, EXEC.x) as called on an instance.
FULL: dict[str, list[tuple[str, str]]] = {
    f"{KCU}.get_kv_cache_config_from_groups": [
        ("0.10.0", f"missing: {KCU.replace('.', '/')}.py does not define"),
        ("0.11.0", "vllm_config, kv_cache_groups, kv_cache_specs, available_memory"),
        ("0.12.0", "vllm_config, kv_cache_groups, available_memory"),
        ("0.20.0", "vllm_config, kv_cache_groups, available_memory, suppress_log="),
        ("0.20.1", "vllm_config, kv_cache_groups, available_memory"),
        ("0.33.0", "missing: does not define 'get_kv_cache_config_from_groups'"),  # kv_cache_planning
    ],
    f"{KCU}._get_kv_cache_groups_uniform_spec": [
        ("0.10.0", "missing: does not define '_get_kv_cache_groups_uniform_spec'"),
        ("0.11.0", "kv_cache_specs"),
        ("0.33.0", "missing: does not define '_get_kv_cache_groups_uniform_spec'"),
    ],
    f"{KCU}.unify_hybrid_kv_cache_specs": [
        ("0.10.0", "kv_cache_spec"),
        ("0.33.0", "missing: does not define 'unify_hybrid_kv_cache_specs'"),
    ],
    f"{KCU}.get_request_block_hasher": [
        ("0.10.0", "missing: does not define 'get_request_block_hasher'"),
        ("0.10.1", "block_size, caching_hash_fn"),
        ("0.24.0", "hash_block_size, caching_hash_fn"),
        ("0.33.0", "hash_block_size, caching_hash_fn, num_hash_lookahead_tokens="),
    ],
    f"{KCU}.init_none_hash": [("0.10.0", "hash_fn")],
    "vllm.utils.hashing.get_hash_fn_by_name": [
        ("0.10.0", "missing: vllm/utils/__init__.py does not define 'hashing'"),
        ("0.11.1", "hash_fn_name"),
    ],
    SCHED: [
        ("0.10.0", ("vllm_config, kv_cache_config, structured_output_manager, mm_registry=, "
                   "include_finished_set=, log_stats=")),
        ("0.11.1", ("vllm_config, kv_cache_config, structured_output_manager, block_size, "
                   "mm_registry=, include_finished_set=, log_stats=")),
        ("0.20.0", ("vllm_config, kv_cache_config, structured_output_manager, block_size, "
                   "hash_block_size=, mm_registry=, include_finished_set=, log_stats=")),
    ],
    f"{SCHED}.add_request": [("0.10.0", "request")],
    f"{SCHED}.schedule": [("0.10.0", ""), ("0.24.0", "throttle_prefills=")],
    f"{SCHED}.finish_requests": [("0.10.0", "request_ids, finished_status")],
    EXEC: [("0.10.0", "vllm_config"), ("0.11.1", "vllm_config, monitor_workers=")],
    f"{EXEC}.collective_rpc": [
        ("0.10.0", "method, timeout=, args=, kwargs=, non_block=, unique_reply_rank="),
        ("0.11.1", ("method, timeout=, args=, kwargs=, non_block=, unique_reply_rank=, "
                   "kv_output_aggregator=")),
        ("0.28.0", ("method, timeout=, args=, kwargs=, non_block=, unique_reply_rank=, "
                   "kv_output_aggregator=, ec_output_aggregator=")),
    ],
    f"{EXEC}.execute_model": [("0.10.0", "scheduler_output"), ("0.11.0", "scheduler_output, non_block=")],
    f"{EXEC}.initialize_from_config": [("0.10.0", "kv_cache_configs")],  # inherited from Executor
    f"{EXEC}.shutdown": [("0.10.0", "")],
    f"{EXEC}.sample_tokens": [
        ("0.10.0", "missing: MultiprocExecutor has no attribute 'sample_tokens'"),
        ("0.11.1", "grammar_output, non_block="),
    ],
    "vllm.v1.structured_output.StructuredOutputManager": [("0.10.0", "vllm_config")],
    "vllm.sequence.IntermediateTensors": [
        ("0.10.0", "tensors"), ("0.11.1", "tensors, kv_connector_output="), ("0.23.0", "tensors"),
    ],
    "vllm.distributed.get_pp_group": [("0.10.0", "")],
    "vllm.distributed.get_tp_group": [("0.10.0", "")],
    "vllm.model_executor.models.interfaces.supports_eagle3": [
        ("0.10.0", "missing: interfaces.py does not define 'supports_eagle3'"),
        ("0.10.1", "model"),  # the implementation, not its two @overload variants
    ],
    "vllm.config.DeviceConfig": [
        # 0.10-0.15: a docs-only @config over @pydantic.dataclasses.dataclass (extra ignored);
        # 0.16+: @config is the pydantic dataclass itself, with extra="forbid".
        ("0.10.0", "device=, **ignored_extra"), ("0.16.0", "device="),
    ],
}  # fmt: skip

# Long generated constructors: the required parameters in order ("" none), "+ **" when unknown
# keywords are taken (pydantic's default extra="ignore"), and keywords accepted / rejected.
REQUIRED: dict[str, list[tuple[str, str]]] = {
    **{f"vllm.config.{c}": [("0.10.0", "+ **"), ("0.16.0", "")] for c in CONFIGS
       if c not in ("SchedulerConfig", "DeviceConfig")},
    "vllm.config.SchedulerConfig": [
        ("0.10.0", "+ **"),  # InitVars max_model_len=8192, is_encoder_decoder=False
        ("0.12.0", "max_model_len, is_encoder_decoder + **"),  # InitVars without a default
        ("0.16.0", "max_model_len, is_encoder_decoder"),
    ],
    "vllm.sampling_params.SamplingParams": [("0.10.0", "")],  # a msgspec.Struct
    "vllm.SamplingParams": [("0.10.0", "")],  # vllm/__init__.py's lazy MODULE_ATTRS export
    "vllm.v1.request.Request": [
        ("0.10.0", ("request_id, prompt_token_ids, multi_modal_inputs, multi_modal_hashes, "
                   "multi_modal_placeholders, sampling_params, pooling_params, eos_token_id")),
        ("0.10.1", ("request_id, prompt_token_ids, multi_modal_kwargs, multi_modal_hashes, "
                   "multi_modal_placeholders, sampling_params, pooling_params, eos_token_id")),
        ("0.10.2", "request_id, prompt_token_ids, sampling_params, pooling_params, eos_token_id"),
        ("0.17.0", "request_id, prompt_token_ids, sampling_params, pooling_params"),
    ],
}  # fmt: skip

# Keywords that must (True) or must not (False) bind, from a release on (each from 0.10.0).
ACCEPTS: list[tuple[str, str, str, bool]] = [
    ("vllm.config.ModelConfig", "0.10.0", "task", True),
    ("vllm.config.ModelConfig", "0.16.0", "task", False),  # removed; extra="forbid" rejects it
    ("vllm.config.ModelConfig", "0.10.0", "enforce_eager", True),
    # field(init=False): pydantic's extra="ignore" drops it silently (no error) before 0.16.
    ("vllm.config.CacheConfig", "0.10.0", "num_gpu_blocks", True),
    ("vllm.config.CacheConfig", "0.16.0", "num_gpu_blocks", False),  # field(init=False)
    ("vllm.config.CacheConfig", "0.10.0", "enable_prefix_caching", True),
    ("vllm.config.ParallelConfig", "0.10.0", "worker_extension_cls", True),
    ("vllm.config.VllmConfig", "0.10.0", "scheduler_config", True),
    ("vllm.sampling_params.SamplingParams", "0.10.0", "max_tokens", True),
    ("vllm.sampling_params.SamplingParams", "0.10.0", "no_such_option", False),
    ("vllm.v1.request.Request", "0.10.0", "arrival_time", True),
    ("vllm.v1.request.Request", "0.10.0", "block_hasher", False),
    ("vllm.v1.request.Request", "0.10.1", "block_hasher", True),
    ("vllm.v1.request.Request", "0.10.0", "eos_token_id", True),
    ("vllm.v1.request.Request", "0.17.0", "eos_token_id", False),
]

# Bind results of speculators' own call sites that are not "ok": (speculators version, callee,
# release from, result); every other site binds on every release. "unknown: ..." only where the
# callee is missing from that release (then `exists` says False).
BINDS: list[tuple[str, str, str, str]] = [
    ("0.3.0", "vllm.model_executor.models.interfaces.supports_eagle3", "0.10.0", "unknown"),
    ("0.3.0", "vllm.model_executor.models.interfaces.supports_eagle3", "0.10.1", "ok"),
    *((s, f"{KCU}.unify_hybrid_kv_cache_specs", v, r) for s in ("0.3.0", "0.4.0")
      for v, r in (("0.10.0", "ok"), ("0.33.0", "unknown"))),
    *((s, f"{KCU}._get_kv_cache_groups_uniform_spec", v, r) for s in ("0.3.0", "0.4.0")
      for v, r in (("0.10.0", "unknown"), ("0.11.0", "ok"), ("0.33.0", "unknown"))),
    ("0.3.0", f"{KCU}.get_kv_cache_config_from_groups", "0.10.0", "unknown"),
    ("0.3.0", f"{KCU}.get_kv_cache_config_from_groups", "0.11.0", "ok"),
    ("0.3.0", f"{KCU}.get_kv_cache_config_from_groups", "0.12.0",
     "mismatch: unexpected keyword argument 'kv_cache_specs'"),
    ("0.3.0", f"{KCU}.get_kv_cache_config_from_groups", "0.33.0", "unknown"),
    ("0.4.0", f"{KCU}.get_kv_cache_config_from_groups", "0.10.0", "unknown"),
    ("0.4.0", f"{KCU}.get_kv_cache_config_from_groups", "0.11.0",
     "mismatch: missing required argument 'kv_cache_specs'"),
    ("0.4.0", f"{KCU}.get_kv_cache_config_from_groups", "0.12.0", "ok"),
    ("0.4.0", f"{KCU}.get_kv_cache_config_from_groups", "0.33.0", "unknown"),
    ("0.3.0", SCHED, "0.10.0", "ok"),
    ("0.3.0", SCHED, "0.11.1", "mismatch: missing required argument 'block_size'"),
    ("0.4.0", SCHED, "0.10.0", "mismatch: unexpected keyword argument 'block_size'"),
    ("0.4.0", SCHED, "0.11.1", "ok"),
    ("0.3.0", "vllm.v1.request.Request", "0.10.0", ("mismatch: missing required arguments "
     "'multi_modal_inputs', 'multi_modal_hashes', 'multi_modal_placeholders'")),
    ("0.4.0", "vllm.v1.request.Request", "0.10.0",
     ("mismatch: unexpected keyword argument 'block_hasher'; missing required arguments "
      "'multi_modal_inputs', 'multi_modal_hashes', 'multi_modal_placeholders'")),
    *((s, "vllm.v1.request.Request", v, r) for s in ("0.3.0", "0.4.0") for v, r in (
        ("0.10.1", ("mismatch: missing required arguments 'multi_modal_kwargs', "
                   "'multi_modal_hashes', 'multi_modal_placeholders'")),
        ("0.10.2", "ok"),
        ("0.17.0", "mismatch: unexpected keyword argument 'eos_token_id'"))),
    ("0.3.0", "vllm.config.SchedulerConfig", "0.10.0", "ok"),
    ("0.3.0", "vllm.config.SchedulerConfig", "0.12.0",
     "mismatch: missing required argument 'is_encoder_decoder'"),
    ("0.4.0", "vllm.utils.hashing.get_hash_fn_by_name", "0.10.0", "unknown"),
    ("0.4.0", "vllm.utils.hashing.get_hash_fn_by_name", "0.11.1", "ok"),
    ("0.4.0", f"{KCU}.get_request_block_hasher", "0.10.0", "unknown"),
    ("0.4.0", f"{KCU}.get_request_block_hasher", "0.10.1", "ok"),
    ("0.4.0", f"{EXEC}.sample_tokens", "0.10.0", "unknown"),
    ("0.4.0", f"{EXEC}.sample_tokens", "0.11.1", "ok"),
]  # fmt: skip


def _v(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def _at(rows: list[tuple[str, str]], version: str) -> str:
    """The expectation of the last row whose release is at or before `version`."""
    found = [expected for start, expected in rows if _v(start) <= _v(version)]
    assert found, (rows, version)
    return found[-1]


def _is_method(qualname: str) -> bool:
    return qualname.rpartition(".")[0] in (SCHED, EXEC)


def _get(src: StaticSignatures, qualname: str) -> tuple[Signature | None, str]:
    if _is_method(qualname):
        return src.get_bound(qualname), src.bound_unknown_reason(qualname) or ""
    return src.get(qualname), src.unknown_reason(qualname) or ""


@pytest.fixture(scope="module", params=RELEASES)
def release(request: pytest.FixtureRequest) -> tuple[str, StaticSignatures]:
    return request.param, StaticSignatures(realdata.vllm_source(request.param))


@pytest.fixture(scope="module")
def sites() -> dict[str, list[specuse.Site]]:
    return {v: specuse.call_sites(realdata.speculators_wheel(v)) for v in ("0.3.0", "0.4.0")}


def test_the_tables_cover_every_vllm_name_speculators_uses(sites: dict[str, list[specuse.Site]]) -> None:
    imported = set()
    for version in ("0.3.0", "0.4.0"):
        imported |= set(specuse.imported_names(realdata.speculators_wheel(version)).values())
    called = {s.callee for version_sites in sites.values() for s in version_sites}
    covered = set(FULL) | set(REQUIRED)
    # RequestStatus is only read (RequestStatus.FINISHED_ABORTED), never called: see below.
    assert imported - covered == {"vllm.v1.request.RequestStatus"}
    assert called <= covered
    assert covered - imported - called == {"vllm.SamplingParams"}  # the lazy export, on purpose


def test_full_signatures(release: tuple[str, StaticSignatures]) -> None:
    version, src = release
    got, want = {}, {}
    for qualname, rows in FULL.items():
        sig, why = _get(src, qualname)
        expected = _at(rows, version)
        want[qualname] = expected
        if sig is not None:
            got[qualname] = render(sig)
        elif expected.startswith("missing: ") and expected[9:] in why:
            got[qualname] = expected  # the reason names what is missing
        else:
            got[qualname] = f"unknown: {why}"
    assert got == want


def test_generated_constructors(release: tuple[str, StaticSignatures]) -> None:
    version, src = release
    got, want = {}, {}
    for qualname, rows in REQUIRED.items():
        sig = src.get(qualname)
        assert sig is not None, (qualname, src.unknown_reason(qualname))
        required = ", ".join(p.name for p in sig.params if p.required)
        assert all(p.kind in ("positional_or_keyword", "var_keyword") for p in sig.params), qualname
        catch_all = [p.name for p in sig.params if p.kind == "var_keyword"]
        assert catch_all in ([], ["ignored_extra"]), qualname
        got[qualname] = f"{required} + **".strip() if catch_all else required
        want[qualname] = _at(rows, version)
    assert got == want
    groups: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for qualname, start, keyword, accepted in ACCEPTS:
        groups.setdefault((qualname, keyword), []).append((start, str(accepted)))
    got_accepts = {key: str(src.get(key[0]).accepts(key[1])) for key in groups}
    assert got_accepts == {key: _at(rows, version) for key, rows in groups.items()}


def test_speculators_calls_bind(release: tuple[str, StaticSignatures],
                                sites: dict[str, list[specuse.Site]]) -> None:
    version, src = release
    got, want = {}, {}
    for spec_version, version_sites in sites.items():
        for site in version_sites:
            key = (spec_version, site.callee, f"{site.path}:{site.line}")
            sig, why = _get(src, site.callee)
            if sig is None:
                got[key] = "unknown"
                # Only ever a missing name, as the audit asks it (a method on an instance).
                found = src.members.exists(site.callee, on_instance=_is_method(site.callee))
                assert found.kind is Presence.MISSING, (key, why, found)
            else:
                result = sig.bind(site.n_positional, site.keywords, site.star_args, site.star_kwargs)
                reason = bind_reason(result)
                got[key] = result.status + (f": {reason}" if reason else "")
            rows = [(v, r) for s, c, v, r in BINDS if s == spec_version and c == site.callee]
            want[key] = _at(rows, version) if rows and _v(rows[0][0]) <= _v(version) else "ok"
    assert got == want


def test_the_audit_checks_speculators_calls_so(release: tuple[str, StaticSignatures],
                                               sites: dict[str, list[specuse.Site]]) -> None:
    # The same sites through the audit's own checker (existence, then the signature, a method
    # bound without self): what the BINDS rows say, and for a callee this release lacks, the
    # mismatch the audit reports with the existence engine's reason.
    version, src = release
    records = []
    for spec_version, version_sites in sites.items():
        for site in version_sites:
            method = _is_method(site.callee)
            records.append((spec_version, site, CallRecord(
                site.path, site.line, site.callee, site.n_positional, site.keywords, site.star_args,
                site.star_kwargs, "", kind=METHOD if method else CALL, on_instance=method)))
    checker = Checker(src.get_many({r.callee for _, _, r in records}), "", src.members, src)
    got, want = {}, {}
    for spec_version, site, record in records:
        key = (spec_version, site.callee, f"{site.path}:{site.line}")
        found = checker.check(record)
        got[key] = f"{found.status}: {found.reason}" if found.reason else str(found.status)
        rows = [(v, r) for s, c, v, r in BINDS if s == spec_version and c == site.callee]
        expected = _at(rows, version) if rows and _v(rows[0][0]) <= _v(version) else "ok"
        if expected == "unknown":  # missing from this release: the audit says so, and why
            expected = f"mismatch: {src.members.exists(site.callee, on_instance=record.on_instance).reason}"
        want[key] = expected
    assert got == want


def test_request_status_member(release: tuple[str, StaticSignatures]) -> None:
    _, src = release
    # As the audit reads `RequestStatus.FINISHED_ABORTED` (an attribute of the class) and
    # `status.value` (of an instance).
    assert src.members.exists("vllm.v1.request.RequestStatus.FINISHED_ABORTED").kind is Presence.PRESENT
    missing = src.members.exists("vllm.v1.request.RequestStatus.NO_SUCH_STATUS")
    assert missing.answer == (False, "vllm.v1.request.RequestStatus has no attribute 'NO_SUCH_STATUS'")
    assert src.members.exists("vllm.v1.request.RequestStatus.value", on_instance=True).found is True  # IntEnum's


# Where the audit's import check finds a name speculators imports: present, unless a row here says
# it is missing from a release on (until the next row): (name, release, kind, moved_to).
IMPORTS: dict[str, list[tuple[str, Presence, tuple[str, ...]]]] = {
    f"{KCU}.get_kv_cache_config_from_groups": [
        ("0.10.0", Presence.MISSING, ()), ("0.11.0", Presence.PRESENT, ()),
        ("0.33.0", Presence.MOVED, ("vllm.v1.core.kv_cache_planning",)),
    ],
    f"{KCU}._get_kv_cache_groups_uniform_spec": [
        ("0.10.0", Presence.MISSING, ()), ("0.11.0", Presence.PRESENT, ()),
        ("0.33.0", Presence.MOVED, ("vllm.v1.core.kv_cache_planning",)),
    ],
    f"{KCU}.unify_hybrid_kv_cache_specs": [
        ("0.10.0", Presence.PRESENT, ()), ("0.33.0", Presence.MOVED, ("vllm.v1.core.kv_cache_planning",)),
    ],
    f"{KCU}.get_request_block_hasher": [("0.10.0", Presence.MISSING, ()), ("0.10.1", Presence.PRESENT, ())],
    # Before vllm.utils.hashing existed, the function was in vllm.utils itself (from 0.10.1).
    "vllm.utils.hashing.get_hash_fn_by_name": [
        ("0.10.0", Presence.MISSING, ()), ("0.10.1", Presence.MOVED, ("vllm.utils",)),
        ("0.11.1", Presence.PRESENT, ()),
    ],
    "vllm.model_executor.models.interfaces.supports_eagle3": [
        ("0.10.0", Presence.MISSING, ()), ("0.10.1", Presence.PRESENT, ()),
    ],
}  # fmt: skip


def test_speculators_imports_as_the_audit_checks_them(release: tuple[str, StaticSignatures]) -> None:
    version, src = release
    imported = set()
    for spec_version in ("0.3.0", "0.4.0"):
        imported |= set(specuse.imported_names(realdata.speculators_wheel(spec_version)).values())
    got, want = {}, {}
    for name in sorted(imported):
        found = src.members.imported(name)
        got[name] = (found.kind, found.moved_to)
        rows = [(v, (k, m)) for v, k, m in IMPORTS.get(name, [])]
        want[name] = _at(rows, version) if rows else (Presence.PRESENT, ())
        if found.kind is Presence.MOVED:  # what the audit says of it
            short = name.rpartition(".")[2]
            assert existence_reason(found, imported=True).endswith(
                f"; {short} is in {', '.join(found.moved_to)} now"), found
    assert got == want


def test_moved_names_are_located() -> None:
    # vLLM 0.33 moved three of speculators' kv-cache helpers out of kv_cache_utils.
    src = StaticSignatures(realdata.vllm_source("0.33.0"))
    names = ["get_kv_cache_config_from_groups", "_get_kv_cache_groups_uniform_spec",
             "unify_hybrid_kv_cache_specs"]
    assert {n: src.members.relocations(n) for n in names} == {n: ["vllm.v1.core.kv_cache_planning"] for n in names}
    old = StaticSignatures(realdata.vllm_source("0.10.0"))
    assert old.members.relocations("get_kv_cache_config_from_groups") == []  # not yet written in 0.10.0
    assert old.members.relocations("get_kv_cache_config") == ["vllm.v1.core.kv_cache_utils"]


# Keywords speculators passes that bind only to be dropped (pydantic's extra="ignore"): the call
# runs, the setting has no effect. (speculators version, callee, keyword, first, last release)
IGNORED = [("0.4.0", "vllm.config.SchedulerConfig", "is_encoder_decoder", "0.10.0", "0.11.0")]


def test_speculators_keywords_silently_ignored(release: tuple[str, StaticSignatures],
                                               sites: dict[str, list[specuse.Site]]) -> None:
    version, src = release
    got = set()
    for spec_version, version_sites in sites.items():
        for site in version_sites:
            sig = None if _is_method(site.callee) else src.get(site.callee)
            for keyword in site.keywords if sig is not None else ():
                if sig.ignores(keyword):
                    got.add((spec_version, site.callee, keyword))
    assert got == {(s, c, k) for s, c, k, first, last in IGNORED
                   if _v(first) <= _v(version) <= _v(last)}

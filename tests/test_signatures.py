"""Signature sources: static (ast) and live (inspect in a subprocess), and call binding."""

from __future__ import annotations

import ast
import importlib.util
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import realdata

from vllm_shim_patch import signatures as sigmod
from vllm_shim_patch.errors import SignatureError
from vllm_shim_patch.signatures import (
    BindResult,
    LiveSignatures,
    Param,
    Signature,
    SignatureSource,
    StaticSignatures,
)

TREE = Path(__file__).parent / "fixtures" / "sigtree"
SRC = Path(sigmod.__file__).parent


def render(sig: Signature | None) -> str | None:
    """Python-like parameter text: `a, b=, /, c, *args, d, **kwargs` (`=` marks a default)."""
    if sig is None:
        return None
    out: list[str] = []
    kinds = [p.kind for p in sig.params]
    for i, p in enumerate(sig.params):
        if p.kind == "keyword_only" and "var_positional" not in kinds and "*" not in out:
            out.append("*")
        text = {"var_positional": "*", "var_keyword": "**"}.get(p.kind, "") + p.name
        out.append(text + ("" if p.required or p.kind.startswith("var_") else "="))
        if p.kind == "positional_only" and (
            i + 1 == len(kinds) or kinds[i + 1] != "positional_only"
        ):
            out.append("/")
    return ", ".join(out)


@pytest.fixture(scope="module")
def static() -> StaticSignatures:
    return StaticSignatures(TREE)


# --- static reading of the fixture tree -----------------------------------------------------

# (qualname, parameters); every row is also checked against the live source below.
RESOLVED = [
    # functions
    ("vllm.funcs.plain", "a, b=, *, c, d="),
    ("vllm.funcs.posonly", "a, b, /, c, *args, d, **kwargs"),
    ("vllm.funcs.star", "*args, **kwargs"),
    ("vllm.funcs.coro", "x, y="),
    ("vllm.funcs.cached", "key"),
    ("vllm.funcs.cached_bare", "key, other="),
    ("vllm.funcs.over", "x, flag="),  # the implementation, not the @overload variants
    ("vllm.funcs.alias", "a, b=, *, c, d="),
    # re-exports
    ("vllm.reexport.Thing", "size, *, color="),
    ("vllm.reexport.renamed_helper", "x, /, y="),
    ("vllm.reexport.impl_mod.Thing", "size, *, color="),
    ("vllm.reexport.funcs_mod.plain", "a, b=, *, c, d="),
    ("vllm.reexport.chained", "a, b=, *, c, d="),
    ("vllm.reexport.starred", "q"),
    ("vllm.reexport.fallback", "a, b=, *, c, d="),
    ("vllm.reexport.Alias", "size, *, color="),
    ("vllm.reexport.AttrAlias", "*args, **kwargs"),
    ("vllm.reexport.DeepAlias", "a, b=, *, flag="),
    ("vllm.shadow.starred", "a, b=, *, c, d="),
    ("vllm.star_chain.starred", "q"),
    ("vllm.star_chain.Thing", "size, *, color="),
    # classes and inheritance
    ("vllm.classes.NoInit", ""),
    ("vllm.classes.Base", "a, b=, *, flag="),
    ("vllm.classes.Child", "a, b=, *, flag="),
    ("vllm.classes.GrandChild", "a, b=, *, flag="),
    ("vllm.classes.Override", "x"),
    ("vllm.classes.Multi", "x"),
    ("vllm.classes.Diamond", "x"),
    ("vllm.classes.WithNew", "size, *, name="),
    ("vllm.classes.Box", "item, *rest"),
    ("vllm.classes.Abstract", "n"),
    ("vllm.classes.Concrete", "n"),
    ("vllm.classes.WithAbcMeta", "q"),
    ("vllm.classes.Methods", ""),
    ("vllm.classes.Methods.method", "self, a, b="),
    ("vllm.classes.Methods.build", "spec, *, strict="),
    ("vllm.classes.Methods.helper", "x, y"),
    ("vllm.classes.Methods.Inner", "z"),
    ("vllm.classes.Child.__init__", "self, a, b=, *, flag="),
    # stdlib dataclasses
    ("vllm.dc.Point", "x, y=, scale=, cache="),
    ("vllm.dc.Point3", "x=, y=, scale=, cache=, z="),
    ("vllm.dc.NotADataclass", "x, y=, scale=, cache="),
    ("vllm.dc.Options", "verbose=, *, name, level="),
    ("vllm.dc.Sentinel", "a, *, b, c="),
    ("vllm.dc.FieldKw", "a, c=, *, b"),
    ("vllm.dc.RequiredInitVar", "mode, ratio="),
    ("vllm.dc.ExplicitInit", "only"),
    ("vllm.dc.NoGeneratedInit", "base_arg"),
    ("vllm.dc.FromPlainBase", "a="),
    ("vllm.dc.KwBase", "*, k, j="),
    ("vllm.dc.AfterKwBase", "p, *, k, j="),
    # PEP 681 dataclass_transform
    ("vllm.transform.Job", "*, name, retries=, tags="),
    ("vllm.transform.Positional", "a, b=, *, c="),
    # pydantic dataclasses, vLLM's @config pattern
    (
        "vllm.pyd.SchedulerLike",
        "max_model_len, is_encoder_decoder, runner_type=, max_num_seqs=, policy=, _private=",
    ),
    ("vllm.pyd.DeviceLike", "device="),
    ("vllm.pyd.AllowsExtra", "a=, **extra_data"),
    ("vllm.pyd.Loose", "a, b=, *, c, **ignored_extra"),
    ("vllm.pyd.Strict", "*, a=, b"),
    # msgspec.Struct, vLLM's SamplingParams pattern
    ("vllm.structs.Params", "n=, temperature=, _hidden=, renamed="),
    ("vllm.structs.KwParams", "*, x=, y"),
    ("vllm.structs.SubKw", "z, w=, *, x=, y"),
]

# (qualname, part of the reason); static reading must not guess these.
UNKNOWN = [
    ("vllm.funcs.only_overloads", "only @overload variants"),
    ("vllm.funcs.wrapped", "decorator @_wrap on wrapped may change its signature"),
    ("vllm.funcs.rebound", "'rebound' is bound 2 times"),
    ("vllm.reexport.either", "'either' is bound 2 times"),
    ("vllm.reexport.hidden", "does not define 'hidden'"),
    ("vllm.lazy.Lazy", "module __getattr__"),
    ("vllm.shadow_late.starred", "is bound and also star-imported after"),
    ("vllm.cycle_a.Loop", "refers back to itself"),
    ("vllm.classes.FromExternal", "collections.OrderedDict, whose constructor is not known"),
    ("vllm.classes.Registered", "class decorator @register"),
    ("vllm.classes.DecoratedInit", "decorator @_log_calls on __init__"),
    ("vllm.classes.WithMeta", "metaclass Meta"),
    ("vllm.classes.NewAndInit", "both __new__ and __init__"),
    ("vllm.classes.Methods.value", "bound 2 times"),
    ("vllm.pyd.Aliased", "renames the constructor keyword"),
    ("vllm.pyd.OwnInit", "pydantic dataclass vllm.pyd.OwnInit defines __init__"),
    ("vllm.pyd.AnnotatedDefault", "has a Field(...) inside Annotated[...]"),
    ("vllm.structs.WithAnnotatedMixin", "mixin vllm.structs.AnnotatedMixin"),
    ("vllm.invalid.RequiredAfterDefault", "required field 'b' follows a field with a default"),
    ("vllm.invalid.StructWithInit", "defines __init__ next to msgspec.Struct"),
    ("vllm.invalid.SelfBase", "inherits from itself"),
    ("vllm.nowhere.f", "does not define 'nowhere'"),
    ("os.path.join", "no module"),
    ("vllm.reexport", "is a module"),
]


@pytest.mark.parametrize(("qualname", "expected"), RESOLVED, ids=[q for q, _ in RESOLVED])
def test_static_resolves(static: StaticSignatures, qualname: str, expected: str) -> None:
    sig = static.get(qualname)
    assert sig is not None, static.unknown_reason(qualname)
    assert sig.qualname == qualname
    assert render(sig) == expected


@pytest.mark.parametrize(("qualname", "reason"), UNKNOWN, ids=[q for q, _ in UNKNOWN])
def test_static_unknown(static: StaticSignatures, qualname: str, reason: str) -> None:
    assert static.get(qualname) is None
    assert reason in (static.unknown_reason(qualname) or "")


def test_static_params_and_origin(static: StaticSignatures) -> None:
    sig = static.get("vllm.funcs.posonly")
    assert sig == Signature(
        "vllm.funcs.posonly",
        (
            Param("a", "positional_only", True),
            Param("b", "positional_only", True),
            Param("c", "positional_or_keyword", True),
            Param("args", "var_positional", False),
            Param("d", "keyword_only", True),
            Param("kwargs", "var_keyword", False),
        ),
        "vllm/funcs.py:10",
    )
    assert static.get("vllm.reexport.Thing").origin == "vllm/reexport/impl.py:2"  # its __init__
    assert static.get("vllm.dc.Point").origin == "vllm/dc.py:8"  # generated: the class line
    assert static.get("vllm.classes.Child").origin == static.get("vllm.classes.Base").origin


def test_static_parses_only_what_a_lookup_needs() -> None:
    fresh = StaticSignatures(TREE)
    fresh.get("vllm.dc.Point3")
    assert fresh.parsed_modules == ["vllm.dc"]
    fresh.get_many(["vllm.reexport.Thing", "vllm.reexport.Alias"])
    # The star import after `Thing`'s import might rebind it, so its source is read too.
    assert fresh.parsed_modules == [
        "vllm.dc",
        "vllm.reexport",
        "vllm.reexport.impl",
        "vllm.reexport.star_src",
    ]


def test_static_reads_a_wheel(tmp_path: Path, static: StaticSignatures) -> None:
    wheel = tmp_path / "vllm-0.0.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for path in sorted(TREE.rglob("*.py")):
            zf.write(path, path.relative_to(TREE).as_posix())
    from_wheel = StaticSignatures(wheel)
    names = [q for q, _ in RESOLVED] + [q for q, _ in UNKNOWN]
    assert {n: render(s) for n, s in from_wheel.get_many(names).items()} == {
        n: render(static.get(n)) for n in names
    }


def test_static_errors(tmp_path: Path) -> None:
    with pytest.raises(SignatureError, match=r"^no vllm package under "):
        StaticSignatures(tmp_path)
    with pytest.raises(SignatureError, match=r"not vllm/ itself"):
        StaticSignatures(TREE / "vllm")
    with pytest.raises(SignatureError, match=r"does not exist"):
        StaticSignatures(tmp_path / "missing")
    bad = tmp_path / "broken.whl"
    bad.write_bytes(b"not a zip")
    with pytest.raises(SignatureError, match=r"^cannot read "):
        StaticSignatures(bad)


def test_sources_share_the_interface() -> None:
    def kind_of(source: SignatureSource) -> str:
        return source.kind

    assert kind_of(StaticSignatures(TREE)) == "static"
    assert kind_of(LiveSignatures(sys.executable)) == "live"


def test_modules_import_only_the_standard_library() -> None:
    allowed = set(sys.stdlib_module_names) | {"vllm_shim_patch"}
    names = ["signatures.py", *(p.name for p in SRC.glob("_static_*.py")),
             *(f"_remote/{p.name}" for p in (SRC / "_remote").glob("*.py"))]
    assert len(names) >= 7
    for name in names:
        tree = ast.parse((SRC / name).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                tops = {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                tops = {(node.module or "").split(".")[0]}
            else:
                continue
            if name.startswith("_remote"):
                assert tops <= set(sys.stdlib_module_names), (name, tops)
            else:
                assert tops <= allowed, (name, tops)


# --- binding --------------------------------------------------------------------------------

REQUEST_017 = Signature(
    "vllm.v1.request.Request",
    (
        Param("request_id", "positional_or_keyword", True),
        Param("prompt_token_ids", "positional_or_keyword", True),
        Param("sampling_params", "positional_or_keyword", True),
        Param("pooling_params", "positional_or_keyword", True),
        Param("client_index", "positional_or_keyword", False),
        Param("arrival_time", "positional_or_keyword", False),
    ),
    "vllm/v1/request.py:60",
)
POSONLY = Signature(
    "f",
    (
        Param("x", "positional_only", True),
        Param("y", "positional_or_keyword", False),
        Param("z", "keyword_only", True),
    ),
    "m.py:1",
)
KWARGS = Signature(
    "g", (Param("a", "positional_or_keyword", True), Param("kw", "var_keyword", False)), "live"
)
POSONLY_KWARGS = Signature(
    "p", (Param("x", "positional_only", True), Param("kw", "var_keyword", False)), "live"
)
VARARGS = Signature(
    "h", (Param("a", "positional_or_keyword", True), Param("rest", "var_positional", False)), "live"
)

REQ4 = "request_id=r, prompt_token_ids=p, sampling_params=s, pooling_params=None"
BIND = [
    # (id, signature, the call's arguments, status, reason)
    ("ok", REQUEST_017, REQ4, "ok", ""),
    ("unexpected", REQUEST_017, REQ4 + ", eos_token_id=e", "mismatch",
     "unexpected keyword argument 'eos_token_id'"),
    ("missing-one", REQUEST_017, "request_id=r, prompt_token_ids=p, sampling_params=s", "mismatch",
     "missing required argument 'pooling_params'"),
    ("missing-two", REQUEST_017, "r, p", "mismatch",
     "missing required arguments 'sampling_params', 'pooling_params'"),
    ("too-many", REQUEST_017, "1, 2, 3, 4, 5, 6, 7", "mismatch",
     "too many positional arguments (7 given, 6 accepted)"),
    ("twice", REQUEST_017, "r, " + REQ4, "mismatch", "multiple values for argument 'request_id'"),
    ("positional-ok", REQUEST_017, "1, 2, 3, 4, 5, 6", "ok", ""),
    ("posonly-by-keyword", POSONLY, "x=1, z=1", "mismatch",
     "positional-only argument 'x' passed as keyword"),
    ("posonly-ok", POSONLY, "1, 2, z=3", "ok", ""),
    ("kwonly-missing", POSONLY, "1, 2", "mismatch", "missing required argument 'z'"),
    ("kwargs-take-any", KWARGS, "1, anything=2, other=3", "ok", ""),
    ("kwargs-take-posonly-name", POSONLY_KWARGS, "1, x=2", "ok", ""),
    ("varargs-take-many", VARARGS, "1, 2, 3, 4, 5, 6, 7, 8, 9", "ok", ""),
    ("star-args", REQUEST_017, "r, *rest", "unknown", "*args/**kwargs at the call"),
    ("star-kwargs", REQUEST_017, "request_id=r, **rest", "unknown", "*args/**kwargs at the call"),
    ("star-still-unexpected", REQUEST_017, "eos_token_id=e, **rest", "mismatch",
     "unexpected keyword argument 'eos_token_id'"),
    ("star-still-too-many", REQUEST_017, "1, 2, 3, 4, 5, 6, 7, *rest", "mismatch",
     "too many positional arguments (7 given, 6 accepted)"),
    ("star-args-cannot-fill-kwonly", POSONLY, "*rest", "mismatch", "missing required argument 'z'"),
    ("star-kwargs-cannot-fill-posonly", POSONLY, "**rest", "mismatch",
     "missing required argument 'x'"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("sig", "arguments", "status", "reason"),
    [row[1:] for row in BIND],
    ids=[row[0] for row in BIND],
)
def test_bind(sig: Signature, arguments: str, status: str, reason: str) -> None:
    assert bind_call(sig, arguments) == BindResult(status, reason)


def bind_call(sig: Signature, arguments: str) -> BindResult:
    """Bind the arguments of a call written as Python (`1, x=2, *rest`)."""
    call = ast.parse(f"f({arguments})", mode="eval").body
    assert isinstance(call, ast.Call)
    return sig.bind(
        sum(not isinstance(a, ast.Starred) for a in call.args),
        [kw.arg for kw in call.keywords if kw.arg is not None],
        star_args=any(isinstance(a, ast.Starred) for a in call.args),
        star_kwargs=any(kw.arg is None for kw in call.keywords),
    )


def test_accepts_and_requires() -> None:
    assert REQUEST_017.accepts("arrival_time") and not REQUEST_017.accepts("eos_token_id")
    assert REQUEST_017.requires("pooling_params") and not REQUEST_017.requires("arrival_time")
    assert not REQUEST_017.requires("eos_token_id")
    assert KWARGS.accepts("eos_token_id") and not KWARGS.requires("eos_token_id")
    assert not POSONLY.accepts("x") and POSONLY.requires("x") and POSONLY.accepts("z")


# --- live: the same fixture tree, imported in a subprocess ----------------------------------


def _importable(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _live_rows() -> list[tuple[str, str]]:
    skip = set()
    if not _importable("pydantic"):
        skip.add("vllm.pyd.")
    if not _importable("msgspec"):
        skip.add("vllm.structs.")
    if sys.version_info < (3, 11) and not _importable("typing_extensions"):
        skip.add("vllm.transform.")
    return [(q, e) for q, e in RESOLVED if not any(q.startswith(s) for s in skip)]


def _env(*paths: Path) -> dict[str, str]:
    """This environment with `paths` first on PYTHONPATH (the subprocess sees what pytest sees)."""
    rest = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(p) for p in paths] + rest)}


@pytest.fixture(scope="module")
def live_answers() -> dict[str, Signature | None]:
    live = LiveSignatures(sys.executable, env=_env(TREE))
    return live.get_many([q for q, _ in _live_rows()])


def test_live_agrees_with_static(
    live_answers: dict[str, Signature | None], static: StaticSignatures
) -> None:
    rows = _live_rows()
    assert len(rows) >= len(RESOLVED) - 10
    live = {q: render(live_answers[q]) for q, _ in rows}
    assert live == {q: render(static.get(q)) for q, _ in rows}
    assert all(s.origin == "live" for s in live_answers.values() if s is not None)


def test_live_caches_and_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    real_run = subprocess.run

    def counting_run(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(kwargs["input"])
        return real_run(*args, **kwargs)

    monkeypatch.setattr(sigmod.subprocess, "run", counting_run)
    live = LiveSignatures(sys.executable, env=_env(TREE))
    first = live.get_many(["vllm.funcs.plain", "vllm.reexport.hidden", "vllm.funcs.plain"])
    assert list(first) == ["vllm.funcs.plain", "vllm.reexport.hidden"]
    assert render(first["vllm.funcs.plain"]) == "a, b=, *, c, d="
    assert first["vllm.reexport.hidden"] is None
    assert "has no attribute 'hidden'" in (live.unknown_reason("vllm.reexport.hidden") or "")
    assert live.get("vllm.funcs.plain") is first["vllm.funcs.plain"]
    assert live.get("vllm.reexport.hidden") is None
    assert len(calls) == 1


def _fake_vllm(root: Path, init: str, **modules: str) -> Path:
    (root / "vllm").mkdir(parents=True)
    (root / "vllm" / "__init__.py").write_text(init)
    for name, text in modules.items():
        (root / "vllm" / f"{name}.py").write_text(text)
    return root


def test_live_import_failure_names_the_cause(tmp_path: Path) -> None:
    root = _fake_vllm(tmp_path, "import not_a_real_dependency_xyz\n")
    live = LiveSignatures(sys.executable, env=_env(root))
    with pytest.raises(SignatureError) as info:
        live.get("vllm.anything")
    lines = str(info.value).splitlines()
    assert lines[0] == (
        f"vllm fails to import in {sys.executable}: "
        "ModuleNotFoundError: No module named 'not_a_real_dependency_xyz'"
    )
    assert any("Traceback" in line or "vllm/__init__.py" in line for line in lines[1:])


def test_live_per_name_errors_are_unknown(tmp_path: Path) -> None:
    root = _fake_vllm(
        tmp_path,
        "",
        needs_dep="import not_a_real_dependency_xyz\ndef f(a): pass\n",
        ok="VALUE = 3\ndef f(a, /): pass\n",
    )
    live = LiveSignatures(sys.executable, env=_env(root))
    got = live.get_many(["vllm.needs_dep.f", "vllm.ok.VALUE", "vllm.ok.f", "vllm.ok.g"])
    assert got["vllm.needs_dep.f"] is None
    assert "No module named 'not_a_real_dependency_xyz'" in (
        live.unknown_reason("vllm.needs_dep.f") or ""
    )
    assert got["vllm.ok.VALUE"] is None and "not callable" in (
        live.unknown_reason("vllm.ok.VALUE") or ""
    )
    assert got["vllm.ok.g"] is None
    assert render(got["vllm.ok.f"]) == "a, /"


def test_live_output_survives_noise_on_stdout(tmp_path: Path) -> None:
    init = "import os\nprint('INFO vllm is starting')\nos.write(1, b'raw bytes on fd 1\\n')\n"
    root = _fake_vllm(tmp_path, init, m="def f(a, *, b=1): print('called?')\n")
    assert render(LiveSignatures(sys.executable, env=_env(root)).get("vllm.m.f")) == "a, *, b="


def test_live_probe_directory_cannot_shadow_modules(tmp_path: Path) -> None:
    probe_dir = tmp_path / "remote"
    probe_dir.mkdir()
    shutil.copy(sigmod.PROBE, probe_dir / "signature_probe.py")
    (probe_dir / "json.py").write_text("raise ImportError('shadowed json')\n")
    (probe_dir / "inspect.py").write_text("raise ImportError('shadowed inspect')\n")
    _fake_vllm(probe_dir, "raise ImportError('shadowed vllm')\n")
    proc = subprocess.run(
        [sys.executable, str(probe_dir / "signature_probe.py")],
        input='["vllm.funcs.star"]',
        capture_output=True,
        check=False,
        text=True,
        env=_env(TREE),
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert '"kind": "var_positional"' in proc.stdout


def test_live_timeout(tmp_path: Path) -> None:
    root = _fake_vllm(tmp_path, "import time\ntime.sleep(30)\n")
    with pytest.raises(SignatureError, match=r"^signature probe timed out after 0.5s in "):
        LiveSignatures(sys.executable, timeout=0.5, env=_env(root)).get("vllm.x")


def test_live_bad_interpreter(tmp_path: Path) -> None:
    with pytest.raises(SignatureError, match=r"^cannot run "):
        LiveSignatures(str(tmp_path / "no-python")).get("vllm.x")


def test_live_probe_crash(tmp_path: Path) -> None:
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho 'boom: no interpreter here' >&2\nexit 3\n")
    fake.chmod(0o755)
    with pytest.raises(SignatureError) as info:
        LiveSignatures(str(fake)).get("vllm.x")
    assert str(info.value).splitlines() == [
        f"signature probe failed in {fake} (exit code 3)",
        "boom: no interpreter here",
    ]


# --- the real vLLM sources ------------------------------------------------------------------


# The real vLLM sources are a download (cached): every test using them is slow.
@pytest.fixture(
    scope="module", params=[pytest.param(v, marks=pytest.mark.slow) for v in ("0.16.0", "0.17.0")]
)
def real(request: pytest.FixtureRequest) -> tuple[str, StaticSignatures]:
    return request.param, StaticSignatures(realdata.vllm_source(request.param))


CONFIGS = [
    "SchedulerConfig",
    "CacheConfig",
    "ModelConfig",
    "ParallelConfig",
    "VllmConfig",
    "DeviceConfig",
    "LoadConfig",
]


def _required(sig: Signature) -> list[str]:
    return [p.name for p in sig.params if p.required]


def test_real_get_kv_cache_config_from_groups(real: tuple[str, StaticSignatures]) -> None:
    _, src = real
    sig = src.get("vllm.v1.core.kv_cache_utils.get_kv_cache_config_from_groups")
    assert render(sig) == "vllm_config, kv_cache_groups, available_memory"
    assert not sig.accepts("kv_cache_specs")


def test_real_scheduler_requires_block_size(real: tuple[str, StaticSignatures]) -> None:
    _, src = real
    sig = src.get("vllm.v1.core.sched.scheduler.Scheduler")
    assert render(sig) == (
        "vllm_config, kv_cache_config, structured_output_manager, block_size, "
        "mm_registry=, include_finished_set=, log_stats="
    )
    assert sig.requires("block_size")
    assert sig.origin == "vllm/v1/core/sched/scheduler.py:64"


def test_real_request_eos_token_id(real: tuple[str, StaticSignatures]) -> None:
    version, src = real
    sig = src.get("vllm.v1.request.Request")
    if version == "0.16.0":
        assert sig.requires("eos_token_id")
        assert sig.origin == "vllm/v1/request.py:59"
        assert _required(sig) == [
            "request_id",
            "prompt_token_ids",
            "sampling_params",
            "pooling_params",
            "eos_token_id",
        ]
    else:
        assert not sig.accepts("eos_token_id")
        assert _required(sig) == [
            "request_id",
            "prompt_token_ids",
            "sampling_params",
            "pooling_params",
        ]


def test_real_config_classes(real: tuple[str, StaticSignatures]) -> None:
    _, src = real
    sigs = src.get_many(f"vllm.config.{name}" for name in CONFIGS)
    for name, sig in sigs.items():
        assert sig is not None, (name, src.unknown_reason(name))
        # @config is a pydantic dataclass with extra="forbid": no catch-all keyword.
        assert all(p.kind == "positional_or_keyword" for p in sig.params), name
    sched = sigs["vllm.config.SchedulerConfig"]
    assert sched.origin == "vllm/config/scheduler.py:26"
    for keyword in (
        "max_num_seqs",
        "max_model_len",
        "max_num_batched_tokens",
        "is_encoder_decoder",
    ):
        assert sched.accepts(keyword)
    # InitVar fields with no default are required; ClassVar and Field(init=False) are no parameters.
    assert _required(sched) == ["max_model_len", "is_encoder_decoder"]
    assert not sched.accepts("DEFAULT_MAX_NUM_SEQS") and not sched.accepts(
        "max_num_encoder_input_tokens"
    )
    cache = sigs["vllm.config.CacheConfig"]
    assert cache.accepts("block_size") and cache.accepts("gpu_memory_utilization")
    assert not cache.accepts("num_gpu_blocks")  # field(init=False)
    model = sigs["vllm.config.ModelConfig"]
    for keyword in (
        "model",
        "tokenizer",
        "trust_remote_code",
        "dtype",
        "max_model_len",
        "enforce_eager",
        "limit_mm_per_prompt",
    ):  # the last is an InitVar with a default
        assert model.accepts(keyword)
    assert not model.accepts("hf_config")
    parallel = sigs["vllm.config.ParallelConfig"]
    assert parallel.accepts("tensor_parallel_size") and parallel.accepts("worker_extension_cls")
    assert not parallel.accepts("world_size")
    assert parallel.accepts("_api_process_rank")  # pydantic dataclasses keep underscore fields
    assert render(sigs["vllm.config.DeviceConfig"]) == "device="
    vllm_config = sigs["vllm.config.VllmConfig"]
    for keyword in (
        "model_config",
        "cache_config",
        "parallel_config",
        "scheduler_config",
        "device_config",
        "load_config",
    ):
        assert vllm_config.accepts(keyword)
    for name in CONFIGS:
        if name != "SchedulerConfig":
            assert _required(sigs[f"vllm.config.{name}"]) == [], name


def test_real_other_callables(real: tuple[str, StaticSignatures]) -> None:
    _, src = real
    sampling = src.get("vllm.sampling_params.SamplingParams")  # a msgspec.Struct
    assert sampling.params[:3] == (
        Param("n", "positional_or_keyword", False),
        Param("presence_penalty", "positional_or_keyword", False),
        Param("frequency_penalty", "positional_or_keyword", False),
    )
    assert sampling.accepts("max_tokens") and sampling.accepts("temperature")
    assert _required(sampling) == [] and not sampling.accepts("no_such_option")
    assert (
        render(src.get("vllm.v1.executor.multiproc_executor.MultiprocExecutor"))
        == "vllm_config, monitor_workers="
    )
    assert render(src.get("vllm.v1.structured_output.StructuredOutputManager")) == "vllm_config"
    assert len(src.parsed_modules) < 40


# The calls speculators 0.3.0 makes (vllm_hidden_states_generator.py): (callee, arguments,
# reason on 0.16.0, reason on 0.17.0), "" for a call that binds.
SPECULATORS_CALLS = [
    ("vllm.v1.core.kv_cache_utils.get_kv_cache_config_from_groups",
     "vllm_config=c, kv_cache_groups=g, kv_cache_specs=s, available_memory=m",
     "unexpected keyword argument 'kv_cache_specs'",
     "unexpected keyword argument 'kv_cache_specs'"),
    ("vllm.v1.core.sched.scheduler.Scheduler",
     "vllm_config=c, kv_cache_config=k, structured_output_manager=m",
     "missing required argument 'block_size'", "missing required argument 'block_size'"),
    ("vllm.v1.request.Request",
     ("request_id=r, prompt_token_ids=i, sampling_params=s, pooling_params=None, eos_token_id=e,"
      " arrival_time=t"),
     "", "unexpected keyword argument 'eos_token_id'"),
    # InitVar is_encoder_decoder has no default in 0.16.0 and 0.17.0.
    ("vllm.config.SchedulerConfig", "max_num_seqs=s, max_model_len=m, max_num_batched_tokens=b",
     "missing required argument 'is_encoder_decoder'",
     "missing required argument 'is_encoder_decoder'"),
    ("vllm.config.CacheConfig", "block_size=b, gpu_memory_utilization=g", "", ""),
    ("vllm.config.ModelConfig",
     "model=m, tokenizer=m, trust_remote_code=1, dtype='auto', max_model_len=n, enforce_eager=1",
     "", ""),
    ("vllm.config.ParallelConfig", "tensor_parallel_size=t, worker_extension_cls='x.Y'", "", ""),
    ("vllm.config.VllmConfig",
     ("model_config=m, cache_config=c, parallel_config=p, scheduler_config=s, device_config=d,"
      " load_config=l"),
     "", ""),
    ("vllm.config.DeviceConfig", "", "", ""),
    ("vllm.config.LoadConfig", "", "", ""),
    ("vllm.sampling_params.SamplingParams", "max_tokens=m, temperature=t", "", ""),
    ("vllm.v1.executor.multiproc_executor.MultiprocExecutor", "vllm_config=c", "", ""),
    ("vllm.v1.structured_output.StructuredOutputManager", "vllm_config=c", "", ""),
]  # fmt: skip


def test_real_speculators_calls_bind(real: tuple[str, StaticSignatures]) -> None:
    version, src = real
    got = {q: bind_call(src.get(q), arguments).reason for q, arguments, _, _ in SPECULATORS_CALLS}
    column = 2 if version == "0.16.0" else 3
    assert got == {row[0]: row[column] for row in SPECULATORS_CALLS}

"""The plan cache: a plan is reused only while every input is the same, and reused exactly.

The fast tests drive `make_plan` on the bundled rules over a generator module of our own; the slow
ones run the CLI on the real speculators 0.3.0 against the real vLLM 0.16.0 source.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
from pathlib import Path

import pytest
import realdata
from conftest import GENERATOR, Sandbox
from packaging.version import Version

from vllm_shim_patch.rewrite import plancache
from vllm_shim_patch.rewrite.plan import Plan, make_plan
from vllm_shim_patch.rewrite.plancache import PlanCache, plan_key
from vllm_shim_patch.rewrite.results import FileResult, Site
from vllm_shim_patch.rules.loader import load_pack
from vllm_shim_patch.rewrite.rule import RulePack
from vllm_shim_patch.kinds import Action, FileStatus
from vllm_shim_patch.signatures.model import Param, Signature
from vllm_shim_patch.target import Target


# A generator module of our own (the unit tier reads no wheel) that the bundled rules change: the
# scheduler takes block_size, the cache config turns prefix caching off, and a region the scoped
# rules look for (`VllmHiddenStatesGenerator.generate`) holds a call.
GENERATOR_SOURCE = b"""\
from vllm.config import CacheConfig
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.request import Request


class VllmHiddenStatesGenerator:
    def __init__(self, vllm_config, kv_cache_config, manager):
        self.cache_config = CacheConfig(block_size=16)
        self.scheduler = Scheduler(
            vllm_config=vllm_config,
            kv_cache_config=kv_cache_config,
            structured_output_manager=manager,
        )

    def generate(self, prompt):
        return Request(request_id="0", prompt_token_ids=prompt)
"""


@pytest.fixture(scope="module")
def generator() -> bytes:
    return GENERATOR_SOURCE


def target_for(tmp_path: Path, **changes: object) -> Target:
    base = Target(python=sys.executable, python_version="3.11.7", package="speculators", version="0.3.0",
                  location=tmp_path, record=(), editable=None, vllm_version=None, vllm_location=None)
    return dataclasses.replace(base, **changes)


def key_inputs(tmp_path: Path, generator: bytes) -> dict[str, object]:
    sig = Signature("vllm.v1.request.Request", (Param("request_id", "positional_or_keyword", True),), "x.py:1")
    return {"target": target_for(tmp_path), "rules": load_pack().rules, "version": Version("0.16.0"),
            "signatures": {"vllm.v1.request.Request": sig}, "kind": "static",
            "facts": {"vllm.v1.executor.Executor.sample_tokens": True}, "declined": frozenset(),
            "files": {GENERATOR: generator}}


def test_the_key_is_stable_and_names_every_input(tmp_path: Path, generator: bytes) -> None:
    inputs = key_inputs(tmp_path, generator)
    key = plan_key(**inputs)  # type: ignore[arg-type]
    assert key == plan_key(**key_inputs(tmp_path, generator))  # type: ignore[arg-type]
    sig = inputs["signatures"]["vllm.v1.request.Request"]  # type: ignore[index]
    other_default = dataclasses.replace(sig, params=(Param("request_id", "positional_or_keyword", False, "'x'"),))
    changed = {
        "a file's bytes": {"files": {GENERATOR: generator + b"\n"}},
        "another file": {"files": {GENERATOR: generator, "speculators/x.py": b""}},
        "the version": {"version": Version("0.17.0")},
        "a signature's default text": {"signatures": {"vllm.v1.request.Request": other_default}},
        "no signatures": {"signatures": None},
        "a class fact": {"facts": {"vllm.v1.executor.Executor.sample_tokens": False}},
        "a declined site": {"declined": frozenset({(GENERATOR, 10, "scheduler-add-block-size")})},
        "the target's Python": {"target": target_for(tmp_path, python_version="3.13.1")},
        "the package's place": {"target": target_for(tmp_path / "other")},
        "the rules": {"rules": load_pack().rules[:-1]},
    }
    keys = {what: plan_key(**{**inputs, **change}) for what, change in changed.items()}  # type: ignore[arg-type]
    assert key not in keys.values()
    assert len(set(keys.values())) == len(keys)


def test_the_key_follows_a_rule_file_and_a_codemod_by_their_bytes(tmp_path: Path, generator: bytes) -> None:
    rules_dir = tmp_path / "rules"
    (rules_dir / "codemods").mkdir(parents=True)
    codemod = rules_dir / "codemods" / "mine.py"
    codemod.write_text("def rewrite(call, site):\n    return call\n")
    rule_file = rules_dir / "mine.yaml"
    rule_file.write_text("schema: 1\nrules:\n  - id: mine\n    call: vllm.v1.request.Request\n"
                         "    since: '0.12'\n    codemod: mine\n    why: a test\n")
    inputs = {**key_inputs(tmp_path, generator), "rules": load_pack([rule_file]).rules}
    before = plan_key(**inputs)  # type: ignore[arg-type]
    codemod.write_text("def rewrite(call, site):\n    return call  # changed\n")
    after_codemod = plan_key(**inputs)  # type: ignore[arg-type]
    rule_file.write_text(rule_file.read_text().replace("a test", "a test, edited"))
    after_rule = plan_key(**inputs)  # type: ignore[arg-type]
    (rules_dir / "codemods" / "helpers.py").write_text("NAME = 'x'\n")  # a module the codemod may import
    after_neighbour = plan_key(**inputs)  # type: ignore[arg-type]
    assert len({before, after_codemod, after_rule, after_neighbour}) == 4
    rule_file.unlink()
    assert plan_key(**inputs) is None  # type: ignore[arg-type]  (unreadable: no cache, never a guess)


def test_the_key_follows_a_package_a_codemod_imports_from_elsewhere(
        tmp_path: Path, generator: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    """A dry run reads the cache too: an edit of a helper package a codemod imports plans anew."""
    rules_dir = tmp_path / "rules"
    (rules_dir / "codemods").mkdir(parents=True)
    (rules_dir / "codemods" / "mine.py").write_text(
        "import json\nfrom libcst import Name\nfrom vsp_test_helpers.words import WORD\nimport mine_beside\n\n"
        "def rewrite(call, site):\n    return call\n")
    (rules_dir / "codemods" / "mine_beside.py").write_text("")
    rule_file = rules_dir / "mine.yaml"
    rule_file.write_text("schema: 1\nrules:\n  - id: mine\n    call: vllm.v1.request.Request\n"
                         "    since: '0.12'\n    codemod: mine\n    why: a test\n")
    inputs = {**key_inputs(tmp_path, generator), "rules": load_pack([rule_file]).rules}
    absent = plan_key(**inputs)  # type: ignore[arg-type]
    helpers = tmp_path / "site" / "vsp_test_helpers"
    helpers.mkdir(parents=True)
    (helpers / "__init__.py").write_text("")
    (helpers / "words.py").write_text("WORD = 'a'\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    present = plan_key(**inputs)  # type: ignore[arg-type]
    (helpers / "words.py").write_text("WORD = 'ab'\n")
    edited = plan_key(**inputs)  # type: ignore[arg-type]
    assert len({absent, present, edited}) == 3
    assert "vsp_test_helpers" not in sys.modules  # located, not imported
    assert plancache._imported((rules_dir / "codemods" / "mine.py").read_bytes()) == {
        "libcst", "vsp_test_helpers", "mine_beside"}  # json: the standard library


def test_the_bundled_codemods_import_only_what_the_code_stamp_covers() -> None:
    """What lets the key skip scanning them: the standard library, libcst, the tool, one another."""
    folder = plancache._bundled_codemods()
    assert folder is not None
    names = {p.stem for p in folder.glob("*.py")}
    found = {t for p in folder.glob("*.py") for t in plancache._imported(p.read_bytes())}
    assert found - names <= plancache._COVERED and "libcst" in found


def test_the_key_follows_the_tools_own_code(tmp_path: Path, generator: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    key = plan_key(**key_inputs(tmp_path, generator))  # type: ignore[arg-type]
    monkeypatch.setattr(plancache, "_code_stamp", "another build of the tool")
    assert plan_key(**key_inputs(tmp_path, generator)) != key  # type: ignore[arg-type]


def test_the_code_stamp_covers_libcst_and_the_tools_python(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An upgraded libcst may parse what the old one refused (a SKIPPED file): a new stamp."""
    import importlib.util

    import libcst

    fake = tmp_path / "libcst"
    fake.mkdir()
    (fake / "__init__.py").write_text("")
    (fake / "native.so").write_bytes(b"1")
    real_find_spec = importlib.util.find_spec

    def stamp_with(libcst_dir: Path | None) -> str:
        monkeypatch.setattr(plancache, "_code_stamp", None)
        monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: (
            importlib.machinery.ModuleSpec("libcst", None, origin=str(libcst_dir / "__init__.py"))
            if name == "libcst" and libcst_dir is not None else real_find_spec(name, *a)))
        return plancache.code_stamp()

    installed = stamp_with(Path(libcst.__file__).parent)
    before = stamp_with(fake)
    (fake / "native.so").write_bytes(b"22")  # another build of the parser
    assert len({installed, before, stamp_with(fake)}) == 3
    monkeypatch.setattr("sys.version", "3.99.0 (another interpreter)")
    assert stamp_with(fake) not in {installed, before}


def test_a_cached_plan_is_the_plan(tmp_path: Path, generator: bytes) -> None:
    pack = load_pack()
    target = target_for(tmp_path)
    cache = PlanCache(tmp_path / "cache")
    files = {GENERATOR: generator, "speculators/__init__.py": b"",
             "speculators/bad.py": b"from vllm.v1.request import Request\nRequest(\n"}
    fresh = make_plan(target, pack, "0.16", files=files, cache=cache)
    assert [r.status for r in fresh.results] == [FileStatus.UNCHANGED, FileStatus.SKIPPED, FileStatus.CHANGED]
    assert len(list((tmp_path / "cache" / "plans").glob("*.json"))) == 1
    reused = make_plan(target, pack, "0.16", files=files, cache=cache, reuse=True)
    assert reused.results == fresh.results
    assert reused.results[2].after != generator and reused.results[2].before == generator
    # Without `reuse` the engine runs again (a command that writes never trusts the cache).
    (entry,) = (tmp_path / "cache" / "plans").glob("*.json")
    data = json.loads(entry.read_text())
    data["results"][2]["sites"][0][6] = "edited in the cache"
    entry.write_text(json.dumps(data))
    assert make_plan(target, pack, "0.16", files=files, cache=cache).results == fresh.results


Planned = tuple[RulePack, Target, Path, Plan]


@pytest.fixture(scope="module")
def planned(tmp_path_factory: pytest.TempPathFactory, generator: bytes) -> Planned:
    """One fresh plan of the generator and the cache folder it left (planned once: the engine
    over the real generator is the slow part)."""
    root = tmp_path_factory.mktemp("planned")
    pack, target = load_pack(), target_for(root)
    fresh = make_plan(target, pack, "0.16", files={GENERATOR: generator}, cache=PlanCache(root / "cache"))
    return pack, target, root / "cache", fresh


@pytest.mark.parametrize("damage", [
    pytest.param(lambda d: b"{not json", id="not-json"),
    pytest.param(lambda d: d.replace(b'"format":2', b'"format":1'), id="other-format"),
    pytest.param(lambda d: d.replace(b'"status":"changed"', b'"status":"rewritten"'), id="unknown-status"),
    pytest.param(lambda d: d.replace(b'"after":"', b'"after":"*'), id="bad-base64"),
    pytest.param(lambda d: d[: len(d) // 2], id="cut-short"),
])
def test_a_damaged_entry_is_planned_anew(tmp_path: Path, generator: bytes, planned: Planned, damage: object) -> None:
    pack, target, kept, fresh = planned
    shutil.copytree(kept, tmp_path / "cache")  # the entry the fresh plan left, damaged below
    cache = PlanCache(tmp_path / "cache")
    files = {GENERATOR: generator}
    (entry,) = (tmp_path / "cache" / "plans").glob("*.json")
    entry.write_bytes(damage(entry.read_bytes()))  # type: ignore[operator]
    key = plan_key(target=target, rules=pack.rules, version=Version("0.16"), signatures=None, kind=None,
                   facts=None, declined=frozenset(), files=files)
    assert key is not None and cache.get(key, files) is None
    assert make_plan(target, pack, "0.16", files=files, cache=cache, reuse=True).results == fresh.results


def test_a_failed_plan_is_not_kept(tmp_path: Path, generator: bytes) -> None:
    rules_dir = tmp_path / "rules"
    (rules_dir / "codemods").mkdir(parents=True)
    (rules_dir / "codemods" / "boom.py").write_text(
        "from vllm_shim_patch.rewrite.scoped import ScopedTransform\n\n"
        "class Codemod(ScopedTransform):\n    def leave_Call(self, original_node, updated_node):\n"
        "        raise ValueError('boom')\n")
    (rules_dir / "boom.yaml").write_text(
        "schema: 1\nrules:\n  - id: boom\n    in: speculators.data_generation.vllm_hidden_states_generator:"
        "VllmHiddenStatesGenerator.generate\n    since: '0.12'\n    codemod: boom\n    why: a test\n")
    pack, target, cache = load_pack([rules_dir / "boom.yaml"]), target_for(tmp_path), PlanCache(tmp_path / "cache")
    plan = make_plan(target, pack, "0.16", files={GENERATOR: generator}, cache=cache)
    assert [r.status for r in plan.results] == [FileStatus.FAILED]
    assert not (tmp_path / "cache" / "plans").exists()


def test_the_folder_keeps_the_newest_entries(tmp_path: Path) -> None:
    cache = PlanCache(tmp_path)
    assert cache.empty  # a first run: the engine imports while the target answers
    cache.folder.mkdir()
    left = cache.folder / f".{0:064x}.tmpabc"  # what a run killed while writing leaves
    left.write_text("{")
    assert cache.empty
    os.utime(left, (1, 1))
    result = FileResult("a.py", FileStatus.CHANGED, b"a", b"b",
                        (Site("r", "a.py", 1, 2, "vllm.X", Action.EDITED, "drop y", True),))
    for i in range(plancache.KEEP + 3):
        cache.put(f"{i:064x}", [result])
        os.utime(cache.folder / f"{i:064x}.json", ns=(i * 10**9, i * 10**9))
    assert not cache.empty
    assert not left.exists()  # pruned with the oldest entries
    kept = sorted(p.stem for p in cache.folder.glob("*.json"))
    assert kept == [f"{i:064x}" for i in range(3, plancache.KEEP + 3)]
    assert cache.get(f"{plancache.KEEP + 2:064x}", {"a.py": b"a"}) == [result]
    assert cache.get(f"{plancache.KEEP + 2:064x}", {"a.py": b"a", "b.py": b""}) is None  # other files


def test_the_cache_is_made_private_whatever_the_umask(tmp_path: Path) -> None:
    cache = PlanCache(tmp_path / "home" / "cache")
    result = FileResult("a.py", FileStatus.UNCHANGED, b"a", b"a", ())
    old = os.umask(0)
    try:
        cache.put("0" * 64, [result])
    finally:
        os.umask(old)
    modes = {p.relative_to(tmp_path).as_posix(): oct(p.stat().st_mode & 0o777)
             for p in (tmp_path / "home", cache.root, cache.folder, *cache.folder.iterdir())}
    assert modes == {"home": "0o700", "home/cache": "0o700", "home/cache/plans": "0o700",
                     f"home/cache/plans/{'0' * 64}.json": "0o600"}
    assert cache.get("0" * 64, {"a.py": b"a"}) == [result]


@pytest.mark.parametrize("how", ["group-writable entry", "world-writable folder", "another user's entry",
                                 "a link"])
def test_an_entry_others_could_write_is_ignored_and_said(
        tmp_path: Path, generator: bytes, planned: Planned, how: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """An entry another user could have written is never read (it could make `--check` say an
    unpatched release is patched): planned anew, and said in one line."""
    pack, target, kept, fresh = planned
    shutil.copytree(kept, tmp_path / "cache")
    cache, files = PlanCache(tmp_path / "cache"), {GENERATOR: generator}
    (entry,) = cache.folder.glob("*.json")
    data = json.loads(entry.read_text())
    data["results"][0]["sites"][0][6] = "forged"
    entry.write_text(json.dumps(data))
    key = plan_key(target=target, rules=pack.rules, version=Version("0.16"), signatures=None, kind=None,
                   facts=None, declined=frozenset(), files=files)
    assert key is not None and cache.get(key, files) is not None  # the forged entry, trusted as it is
    if how == "group-writable entry":
        entry.chmod(0o660)
        said = f"entry {entry} is ignored: it is writable by other users (mode 0660) (remove it: rm {entry})"
    elif how == "world-writable folder":
        cache.folder.chmod(0o777)
        said = (f"at {cache.root} is ignored: {cache.folder} is writable by other users (mode 0777) "
                f"(remove it: rm -r {cache.root})")
    elif how == "another user's entry":
        if os.geteuid() == 0:
            os.chown(entry, 4242, 4242)
        else:  # a stand-in for a second account: the tool told it runs as another uid
            real = os.geteuid()
            monkeypatch.setattr(os, "geteuid", lambda: real + 1)
        said = (f"entry {entry} is ignored: it is owned by uid {entry.stat().st_uid} (you run as uid "
                f"{os.geteuid()}) (remove it: rm {entry})")
    else:
        elsewhere = tmp_path / "elsewhere.json"
        entry.rename(elsewhere)
        entry.symlink_to(elsewhere)
        said = None  # a link is not a file this tool wrote: not followed, nothing to say
    capsys.readouterr()
    assert cache.get(key, files) is None
    assert make_plan(target, pack, "0.16", files=files, cache=cache, reuse=True).results == fresh.results
    err = capsys.readouterr().err.splitlines()
    assert err == ([] if said is None else [f"vllm-shim-patch: the plan cache {said}"])


# ------------------------------------------------------------------ the CLI, real data


def libcst_imported(proc_stderr: str) -> bool:
    return any(line.rsplit("|", 1)[-1].strip() == "libcst" for line in proc_stderr.splitlines()
               if line.startswith("import time:"))


@pytest.mark.slow
def test_a_second_audit_is_read_from_the_cache_without_libcst(sandbox: Sandbox, tmp_path: Path) -> None:
    src = str(realdata.vllm_source(realdata.REFERENCE_VLLM))
    env = {"VSP_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPROFILEIMPORTTIME": "1"}
    first = sandbox.run("--vllm-source", src, "audit", "--json", env=env)
    second = sandbox.run("--vllm-source", src, "audit", "--json", env=env)
    assert (first.returncode, second.returncode) == (0, 0), first.stderr[-2000:]
    assert libcst_imported(first.stderr) and not libcst_imported(second.stderr)
    assert second.stdout == first.stdout
    data = json.loads(second.stdout)
    assert data["summary"]["remaining"] == 0 and data["rules_for"] == realdata.REFERENCE_VLLM


@pytest.mark.slow
def test_a_dry_run_in_another_state_dir_reads_the_plan_the_first_left(sandbox: Sandbox, tmp_path: Path) -> None:
    """The plan cache is the tool's (VSP_CACHE_DIR), not a state dir's: a second dry run, --check and
    diff read the first dry run's plan without libcst and say the same; apply plans anew."""
    env = {"VSP_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPROFILEIMPORTTIME": "1"}
    runs = {}
    for name, state, args in [("first", "a", ("--dry-run",)), ("second", "b", ("--dry-run",)),
                              ("json", "c", ("--dry-run", "--json")), ("check", "d", ("--check",)),
                              ("diff", "e", ("diff",))]:
        sandbox.state = tmp_path / state
        runs[name] = sandbox.run("--vllm-version", "0.16", *args, env=env)
    assert libcst_imported(runs["first"].stderr)
    assert [libcst_imported(runs[n].stderr) for n in ("second", "json", "check", "diff")] == [False] * 4
    said = [line for line in runs["first"].stderr.splitlines() if not line.startswith("import time:")]
    assert runs["second"].stdout == runs["diff"].stdout == runs["first"].stdout and runs["first"].stdout
    assert [line for line in runs["second"].stderr.splitlines() if not line.startswith("import time:")] == said
    assert json.loads(runs["json"].stdout)["files"]
    assert (runs["check"].returncode, runs["first"].returncode) == (1, 0)
    sandbox.state = tmp_path / "f"
    applied = sandbox.run("--vllm-version", "0.16", "--no-verify", env=env)
    assert applied.returncode == 0 and libcst_imported(applied.stderr)  # a command that writes plans anew


@pytest.mark.slow
def test_an_audit_after_a_dry_run_starts_warm_and_an_edit_plans_anew(sandbox: Sandbox, tmp_path: Path) -> None:
    src = str(realdata.vllm_source(realdata.REFERENCE_VLLM))
    env = {"VSP_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPROFILEIMPORTTIME": "1"}
    dry = sandbox.run("--vllm-source", src, "--dry-run", env=env)
    assert dry.returncode == 0, dry.stderr[-2000:]
    warm = sandbox.run("--vllm-source", src, "audit", "--json", env=env)
    assert warm.returncode == 0 and not libcst_imported(warm.stderr)
    # One line more at the top of the generator: a new plan, and every finding one line lower.
    path = sandbox.site / GENERATOR
    path.write_bytes(b"# a local note\n" + path.read_bytes())
    edited = sandbox.run("--vllm-source", src, "audit", "--json", env=env)
    assert edited.returncode == 0 and libcst_imported(edited.stderr)
    before = [(u["path"], u["line"], u["callee"]) for u in json.loads(warm.stdout)["uses"]]
    after = [(u["path"], u["line"], u["callee"]) for u in json.loads(edited.stdout)["uses"]]
    assert after == [(p, line + (p == GENERATOR), c) for p, line, c in before]


@pytest.mark.slow
def test_a_forged_entry_of_ones_own_never_makes_check_say_patched(sandbox: Sandbox, tmp_path: Path) -> None:
    """Even an entry the owner's checks cannot tell from a real one (this user's, 0600) is not all
    `--check` rests on: a cached "patched" that the overlay did not record is planned again."""
    env = {"VSP_CACHE_DIR": str(tmp_path / "cache")}
    dry = sandbox.run("--vllm-version", "0.16", "--dry-run", env=env)
    assert dry.returncode == 0, dry.stderr[-2000:]
    (entry,) = (tmp_path / "cache" / "plans").glob("*.json")
    data = json.loads(entry.read_text())
    assert any(r["after"] is not None for r in data["results"])
    for result in data["results"]:
        result["after"] = None  # "the rules write what is installed": the unpatched release
    entry.write_text(json.dumps(data))
    checked = sandbox.run("--vllm-version", "0.16", "--check", env=env)
    assert checked.returncode == 1, checked.stdout + checked.stderr[-2000:]
    assert "is patched" not in checked.stdout and "not patched" in checked.stdout

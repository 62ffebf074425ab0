"""Every claim the tool makes about the installed package is true, whatever the install looks like:
a BOM, a file too deep to parse, another package, a shadow copy on sys.path, no source, an
editable install, files RECORD does not list, stale bytecode, no RECORD, odd encodings.

Each case was a false "patched"/"passed"/"0 mismatched" or a traceback on the landed tool.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import realdata
from conftest import EDITS, GENERATOR, Sandbox
from inprocess import ERROR

WORKER = "speculators/data_generation/custom_worker.py"
FACING = (GENERATOR, WORKER)  # the vLLM-facing files


def _hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def rewrite(sb: Sandbox, files: dict[str, bytes | None]) -> None:
    """Write (None: delete) package files and make RECORD describe them, as an installer would."""
    record = next(sb.site.glob("speculators-*.dist-info")) / "RECORD"
    lines = record.read_text().splitlines()
    listed = {line.rsplit(",", 2)[0] for line in lines}
    out = []
    for line in lines:
        path = line.rsplit(",", 2)[0]
        if path in files:
            data = files[path]
            if data is None:
                (sb.site / path).unlink()
                continue
            (sb.site / path).write_bytes(data)
            line = f"{path},{_hash(data)},{len(data)}"
        out.append(line)
    for path, data in files.items():
        if path not in listed and data is not None:
            (sb.site / path).parent.mkdir(parents=True, exist_ok=True)
            (sb.site / path).write_bytes(data)
            out.append(f"{path},{_hash(data)},{len(data)}")
    record.write_text("\n".join(out) + "\n")


@pytest.fixture
def src(sandbox: Sandbox) -> Sandbox:
    """The sandbox with the real vLLM 0.16.0 source for signatures."""
    sandbox.extra = ("--vllm-source", str(realdata.vllm_source()))
    return sandbox


# ---------------------------------------------------------------- a UTF-8 BOM


def _with_bom(sb: Sandbox) -> None:
    rewrite(sb, {p: b"\xef\xbb\xbf" + (sb.site / p).read_bytes() for p in FACING})


@pytest.mark.slow
def test_audit_no_rules_sees_through_a_bom(src: Sandbox) -> None:
    plain = src.run("--json", "audit", "--no-rules")
    _with_bom(src)
    bom = src.run("--json", "audit", "--no-rules")
    assert (plain.returncode, bom.returncode) == (1, 1), bom.stderr
    summary = json.loads(bom.stdout)["summary"]
    # 61: the worker's self.model_runner.model (custom_worker:100) is a use, typed through Worker's annotation
    assert (summary["uses"], summary["remaining"]) == (61, 3)
    assert json.loads(plain.stdout)["uses"] == json.loads(bom.stdout)["uses"]


@pytest.mark.slow
def test_verify_binds_every_call_of_bom_files_and_apply_keeps_the_bom(src: Sandbox) -> None:
    _with_bom(src)
    r = src.run("--vllm-version", realdata.REFERENCE_SERIES)
    assert r.returncode == 0, r.stderr
    assert "verification partial: 22 calls bind (static); not checked: 2 imports" in r.stdout
    for path in FACING:
        assert (src.site / path).read_bytes().startswith(b"\xef\xbb\xbf")
    assert src.run("verify").stdout.splitlines()[-1] == (
        "verify speculators 0.3.0: partial: 22 calls bind (static); not checked: 2 imports (pydantic missing "
        "in the target)")
    rolled = src.run("rollback")
    assert rolled.returncode == 0, rolled.stderr
    assert all((src.site / p).read_bytes().startswith(b"\xef\xbb\xbf") for p in FACING)


# ---------------------------------------------------------------- a file too deep to scan


DEEP = b"from vllm import LLM\n\nx = " + b"+".join([b"a"] * 2400) + b"\n"


@pytest.mark.slow
def test_audit_names_a_file_too_deep_to_scan_and_exits_1(src: Sandbox) -> None:
    clean = src.run("audit")
    assert clean.returncode == 0, clean.stdout  # the rules fix every mismatch of 0.3.0
    rewrite(src, {"speculators/deep.py": DEEP})
    deep = str(src.site / "speculators/deep.py")
    subprocess.run([str(src.python), "-c", f"compile(open({deep!r}).read(), 'deep', 'exec')"],
                   check=True)  # the target compiles it
    r = src.run("audit")
    assert r.returncode == 1, r.stderr
    lines = r.stdout.splitlines()
    assert "  speculators/deep.py: not audited: nested too deeply for the scanner (a generated expression?)" in lines
    assert lines[-1].endswith("; 1 file not audited (above)")
    data = json.loads(src.run("--json", "audit", "--no-rules").stdout)
    assert data["not_audited"] == [{"path": "speculators/deep.py",
                                    "reason": "nested too deeply for the scanner (a generated expression?)"}]


# ---------------------------------------------------------------- --package


@pytest.mark.slow
@pytest.mark.parametrize("args", [["--vllm-version", realdata.REFERENCE_SERIES], ["--check", "--vllm-version", realdata.REFERENCE_SERIES],
                                  ["--dry-run", "--vllm-version", realdata.REFERENCE_SERIES], ["audit"]], ids=" ".join)
def test_a_package_the_rules_are_not_for_is_refused_and_nothing_recorded(sandbox: Sandbox, args: list[str]) -> None:
    before = sandbox.snapshot()
    r = sandbox.run("--package", "pip", "--json", *args)
    message = ("--package pip: the rules are for speculators only (a rule file's 'package:' names the "
               "package it is for); nothing was recorded")
    assert (r.returncode, r.stderr) == (2, f"{ERROR}{message}\n")
    assert json.loads(r.stdout) == {"ok": False, "error": message, "kind": "UsageError"}
    assert not sandbox.state.exists()
    assert sandbox.snapshot() == before


@pytest.mark.slow
def test_package_names_compare_as_pep_503_does(src: Sandbox) -> None:
    r = src.run("--package", "Speculators", "--dry-run", "--vllm-version", realdata.REFERENCE_SERIES)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("--- a/speculators/")


# ---------------------------------------------------------------- --dry-run after apply


@pytest.mark.slow
def test_a_dry_run_after_apply_says_nothing_would_be_written(src: Sandbox) -> None:
    first = src.run("--dry-run", "--vllm-version", realdata.REFERENCE_SERIES)
    assert first.returncode == 0 and first.stdout.count("+++ b/") == 2
    assert src.run("--vllm-version", realdata.REFERENCE_SERIES).returncode == 0
    again = src.run("--dry-run", "--vllm-version", realdata.REFERENCE_SERIES)
    assert (again.returncode, again.stdout) == (0, "")
    assert again.stderr.splitlines()[-1] == (
        f"speculators 0.3.0 is already patched for vLLM 0.16 ({EDITS} edits in 2 files, all installed): apply would "
        "write nothing; patch-speculators diff --installed shows the patch")
    data = json.loads(src.run("--json", "--dry-run", "--vllm-version", realdata.REFERENCE_SERIES).stdout)
    assert (data["already_patched"], data["writes"]) == (True, [])
    # The patch stays visible: the installed files against the original, hunk for hunk the dry run's.
    shown = src.run("diff", "--installed")
    assert shown.returncode == 0
    assert shown.stderr.splitlines()[-1] == "speculators 0.3.0 as installed: 2 files differ from the original"
    def strip(text: str) -> list[str]:
        return [ln for ln in text.splitlines() if not ln.startswith("@@")]  # hunk headers name the rules

    assert strip(shown.stdout) == strip(first.stdout)


@pytest.mark.slow
def test_diff_installed_of_an_unpatched_package_is_empty(sandbox: Sandbox) -> None:
    r = sandbox.run("diff", "--installed")
    assert (r.returncode, r.stdout) == (0, "")
    assert r.stderr == "speculators 0.3.0 as installed is its original (RECORD-exact): nothing to show\n"
    assert not sandbox.state.exists()
    # Edited by hand and never recorded: no original to diff against, and it says so.
    (sandbox.site / WORKER).write_bytes(b"# mine\n" + (sandbox.site / WORKER).read_bytes())
    edited = sandbox.run("diff", "--installed")
    assert (edited.returncode, edited.stdout) == (0, "")
    assert edited.stderr == (f"speculators 0.3.0 is not tracked and 1 file differs from RECORD ({WORKER}): the tool "
                             "never recorded the original bytes, so there is no diff to show\n")


# ---------------------------------------------------------------- a shadow copy on sys.path

SHADOW_REASON = ("loaded from {loaded}, not from the installed {expected} (a copy earlier on sys.path, "
                 "e.g. PYTHONPATH or the working folder, shadows the patched package)")


def _shadow(sb: Sandbox, tmp_path: Path) -> tuple[dict[str, str], str, str]:
    import shutil

    shadow = tmp_path / "shadow"
    shutil.copytree(sb.site / "speculators", shadow / "speculators")
    reason = SHADOW_REASON.format(loaded=shadow / "speculators/__init__.py",
                                  expected=sb.site / "speculators/__init__.py")
    return {"PYTHONPATH": str(shadow)}, reason, str(shadow)


@pytest.mark.slow
def test_apply_fails_when_an_unpatched_copy_shadows_the_package(src: Sandbox, tmp_path: Path) -> None:
    env, reason, _ = _shadow(src, tmp_path)
    before = src.snapshot()
    r = src.run("--vllm-version", realdata.REFERENCE_SERIES, env=env)
    assert r.returncode == 1, r.stderr
    assert r.stdout.strip() == (f"verification failed: import speculators.data_generation.custom_worker: {reason}; "
                                "restored 2 files, nothing recorded")
    assert f"import speculators.data_generation.vllm_hidden_states_generator: FAILED: {reason}" in r.stderr
    assert src.snapshot() == before


@pytest.mark.slow
def test_verify_after_apply_names_the_copy_that_was_imported(src: Sandbox, tmp_path: Path) -> None:
    env, reason, _ = _shadow(src, tmp_path)
    assert src.run("--vllm-version", realdata.REFERENCE_SERIES).returncode == 0
    r = src.run("verify", env=env)
    assert r.returncode == 1
    assert r.stdout.splitlines()[-1] == (
        f"verify speculators 0.3.0: FAILED: import speculators.data_generation.custom_worker: {reason}")
    assert src.run("verify").returncode == 0  # without the shadow: the patched files


def _import_check(request: dict[str, object], pythonpath: str) -> list[dict[str, object]]:
    script = Path(__import__("vllm_shim_patch").__file__).parent / "_remote" / "import_check.py"
    proc = subprocess.run([sys.executable, str(script)], input=json.dumps(request), capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": pythonpath}, check=True)
    return json.loads(proc.stdout)  # type: ignore[no-any-return]


def test_the_import_check_compares_each_module_file(tmp_path: Path) -> None:
    site, shadow = tmp_path / "site", tmp_path / "shadow"
    for root, marker in ((site, "patched"), (shadow, "old")):
        (root / "pkg").mkdir(parents=True)
        (root / "pkg" / "__init__.py").write_text("")
        (root / "pkg" / "mod.py").write_text(f"WHO = {marker!r}\n")
    request = {"modules": ["pkg.mod"], "own": "pkg", "location": str(site)}
    ok = _import_check(request, str(site))
    assert [(r["module"], r["status"]) for r in ok] == [("pkg.mod", "ok")]
    wrong = _import_check(request, f"{shadow}:{site}")
    assert [(r["module"], r["status"], r["loaded"], r["expected"]) for r in wrong] == [
        ("pkg.mod", "shadowed", str(shadow / "pkg/__init__.py"), str(site / "pkg/__init__.py"))]
    # Only the module is elsewhere (the package's __path__ reaches another folder first).
    (site / "pkg" / "__init__.py").write_text(f"__path__.insert(0, {str(shadow / 'pkg')!r})\n")
    moved = _import_check(request, str(site))
    assert [(r["status"], r["loaded"], r["expected"]) for r in moved] == [
        ("shadowed", str(shadow / "pkg/mod.py"), str(site / "pkg/mod.py"))]


# ---------------------------------------------------------------- --check's "patched"


def _sourceless(sb: Sandbox) -> None:
    subprocess.run([str(sb.python), "-m", "compileall", "-q", "-b", str(sb.site / "speculators")], check=True)
    record = next(sb.site.glob("speculators-*.dist-info")) / "RECORD"
    out = []
    for line in record.read_text().splitlines():
        path = line.rsplit(",", 2)[0]
        if path.startswith("speculators/") and path.endswith(".py"):
            (sb.site / path).unlink()
            out.append(f"{path}c,,")
        elif "__pycache__/" not in path:
            out.append(line)
    record.write_text("\n".join(out) + "\n")


@pytest.mark.slow
@pytest.mark.parametrize("args", [["--check"], [], ["--dry-run"], ["audit", "--no-rules"]],
                         ids=["check", "apply", "dry-run", "audit"])
def test_a_sourceless_install_is_refused(src: Sandbox, args: list[str]) -> None:
    _sourceless(src)
    r = src.run(*args, "--vllm-version", realdata.REFERENCE_SERIES)
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == (f"{ERROR}speculators 0.3.0 in {src.site} is installed without its source (RECORD lists 44 "
                        ".pyc files and no .py file): the rules rewrite source; reinstall it from its wheel "
                        "(pip install --force-reinstall --no-deps speculators==0.3.0)\n")
    assert not src.state.exists()


@pytest.mark.slow
@pytest.mark.parametrize("applied", [False, True], ids=["unpatched", "after-apply"])
def test_check_with_the_py_files_deleted_is_not_patched(src: Sandbox, applied: bool) -> None:
    if applied:
        assert src.run("--vllm-version", realdata.REFERENCE_SERIES).returncode == 0
    subprocess.run([str(src.python), "-m", "compileall", "-q", str(src.site / "speculators")], check=True)
    for path in src.site.joinpath("speculators").rglob("*.py"):
        path.unlink()
    r = src.run("--check", "--vllm-version", realdata.REFERENCE_SERIES)
    assert r.returncode == 1, r.stderr
    assert r.stdout == ("speculators 0.3.0 is not patched for vLLM 0.16: 44 source files RECORD lists are missing "
                        "(speculators/__init__.py, speculators/__main__.py, speculators/config.py, "
                        "speculators/convert/__init__.py, speculators/convert/eagle/__init__.py and 39 more); "
                        "reinstall speculators and patch it again\n")
    assert len(json.loads(src.run("--json", "--check", "--vllm-version", realdata.REFERENCE_SERIES).stdout)["missing"]) == 44


@pytest.mark.slow
@pytest.mark.parametrize("args", [["--check"], ["--dry-run"], ["audit"], ["audit", "--no-rules"]], ids=" ".join)
def test_an_editable_install_is_not_judged(src: Sandbox, args: list[str]) -> None:
    dist = next(src.site.glob("speculators-*.dist-info"))
    (dist / "direct_url.json").write_text(json.dumps({"url": "file:///src/speculators", "dir_info": {"editable": True}}))
    r = src.run(*args, "--vllm-version", realdata.REFERENCE_SERIES)
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == (f"{ERROR}speculators is installed in editable mode from file:///src/speculators: "
                        "patch that source checkout with git instead\n")


def _unrecord(sb: Sandbox, path: str) -> None:
    record = next(sb.site.glob("speculators-*.dist-info")) / "RECORD"
    record.write_text("".join(ln for ln in record.read_text().splitlines(keepends=True) if not ln.startswith(path + ",")))


@pytest.mark.slow
def test_a_file_missing_from_record_where_a_rule_applies_is_not_patched(src: Sandbox) -> None:
    _unrecord(src, WORKER)
    r = src.run("--vllm-version", realdata.REFERENCE_SERIES)
    assert r.returncode == 1, r.stderr
    assert (f"note: the rules apply to 1 file RECORD does not list, which apply does not edit: {WORKER} "
            "(worker-request-tracking, worker-no-eagle3-gate, worker-capture-hooks); "
            "reinstall speculators so RECORD lists it"
            ) in r.stderr.splitlines()
    check = src.run("--check", "--vllm-version", realdata.REFERENCE_SERIES)
    assert check.returncode == 1
    assert check.stdout == (f"speculators 0.3.0 is not patched for vLLM 0.16: the rules apply to 1 file RECORD does "
                            f"not list, which apply never edits: {WORKER} (worker-request-tracking, "
                            "worker-no-eagle3-gate, worker-capture-hooks); reinstall "
                            "speculators so RECORD lists it\n")


@pytest.mark.slow
def test_an_unrecorded_file_no_rule_touches_does_not_matter(src: Sandbox) -> None:
    (src.site / "speculators" / "local_notes.py").write_text("NOTE = 'mine'\n")
    assert src.run("--vllm-version", realdata.REFERENCE_SERIES).returncode == 0
    assert src.run("--check", "--vllm-version", realdata.REFERENCE_SERIES).returncode == 0


def _pyc(sb: Sandbox, source: bytes, rel: str, mode: str) -> Path:
    """Compile `source` as `rel`'s bytecode in its __pycache__ (as the target's Python names it)."""
    tmp = sb.root / "_src.py"
    tmp.write_bytes(source)
    tag = subprocess.run([str(sb.python), "-c", "import sys; print(sys.implementation.cache_tag)"],
                         capture_output=True, text=True, check=True).stdout.strip()
    dest = (sb.site / rel).parent / "__pycache__" / f"{Path(rel).stem}.{tag}.pyc"
    code = ("import py_compile, sys; py_compile.compile(sys.argv[1], sys.argv[2], doraise=True, "
            "invalidation_mode=py_compile.PycInvalidationMode[sys.argv[3]])")
    subprocess.run([str(sb.python), "-c", code, str(tmp), str(dest), mode], check=True)
    tmp.unlink()
    return dest


@pytest.mark.slow
def test_check_names_unchecked_hash_bytecode_of_the_old_source(src: Sandbox) -> None:
    original = (src.site / WORKER).read_bytes()
    assert src.run("--vllm-version", realdata.REFERENCE_SERIES).returncode == 0
    pyc = _pyc(src, original, WORKER, "CHECKED_HASH")
    assert src.run("--check", "--vllm-version", realdata.REFERENCE_SERIES).returncode == 0  # Python checks it: harmless
    _pyc(src, original, WORKER, "UNCHECKED_HASH")
    r = src.run("--check", "--vllm-version", realdata.REFERENCE_SERIES)
    assert r.returncode == 1
    rel = pyc.relative_to(src.site)
    assert r.stdout == ("speculators 0.3.0 is patched for vLLM 0.16, but Python runs 1 unchecked-hash .pyc file "
                        f"instead of the patched source ({rel}): delete it\n")
    # Compiled from the patched bytes it is current: nothing to say.
    _pyc(src, (src.site / WORKER).read_bytes(), WORKER, "UNCHECKED_HASH")
    assert src.run("--check", "--vllm-version", realdata.REFERENCE_SERIES).returncode == 0


@pytest.mark.slow
def test_bytecode_apply_cannot_delete_is_reported(src: Sandbox) -> None:
    original = (src.site / WORKER).read_bytes()
    pyc = _pyc(src, original, WORKER, "UNCHECKED_HASH")
    cache = pyc.parent
    subprocess.run(["chattr", "+i", str(cache)], check=True)
    try:
        r = src.run("--vllm-version", realdata.REFERENCE_SERIES)
    finally:
        subprocess.run(["chattr", "-i", str(cache)], check=True)
    rel = pyc.relative_to(src.site)
    assert r.returncode == 1, r.stderr
    lines = r.stderr.splitlines()
    assert (f"note: could not delete stale bytecode {rel}: unchecked-hash bytecode, which Python runs instead of "
            "the patched source: delete it") in lines
    gen = [ln for ln in lines if "vllm_hidden_states_generator" in ln and ln.startswith("note: could not delete")]
    assert gen and all(ln.endswith("Python checks it against the patched source, so it will not run") for ln in gen)
    assert src.run("--check", "--vllm-version", realdata.REFERENCE_SERIES).returncode == 1


# ---------------------------------------------------------------- no RECORD, odd encodings, deep files, noisy codemods


@pytest.mark.slow
def test_a_package_without_record_is_one_line(sandbox: Sandbox) -> None:
    (next(sandbox.site.glob("speculators-*.dist-info")) / "RECORD").unlink()
    r = sandbox.run("--check", "--vllm-version", realdata.REFERENCE_SERIES)
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == (f"{ERROR}speculators 0.3.0 in {sandbox.python} has no RECORD: not installed by a wheel "
                        "installer\n")


@pytest.mark.slow
def test_a_package_file_that_is_not_utf8_is_named_by_the_audit(src: Sandbox) -> None:
    rewrite(src, {"speculators/latin.py": b"from vllm import LLM\nNAME = 'caf\xe9'\n"})
    r = src.run("audit")
    assert r.returncode == 1
    assert ("  speculators/latin.py: not audited: cannot decode ('utf-8' codec can't decode byte 0xe9 in position "
            "32: invalid continuation byte)") in r.stdout.splitlines()


@pytest.mark.slow
def test_a_file_with_a_coding_cookie_is_audited(src: Sandbox) -> None:
    rewrite(src, {"speculators/latin.py": b"# -*- coding: latin-1 -*-\nfrom vllm import LLM\nNAME = 'caf\xe9'\n"})
    data = json.loads(src.run("--json", "audit").stdout)
    assert data["not_audited"] == []
    assert ("speculators/latin.py", "vllm.LLM", "ok") in [(u["path"], u["callee"], u["status"]) for u in data["uses"]]


@pytest.mark.slow
def test_verify_all_names_a_file_it_could_not_scan(src: Sandbox) -> None:
    rewrite(src, {"speculators/deep.py": DEEP})
    assert src.run("--vllm-version", realdata.REFERENCE_SERIES).returncode == 0
    r = src.run("verify", "--all")
    assert r.returncode == 0, r.stdout
    assert r.stdout.splitlines()[-1] == (
        "verify speculators 0.3.0: partial: 22 calls bind (static); not checked: 44 imports (pydantic missing in "
        "the target), the calls in 1 file (speculators/deep.py: nested too deeply for the scanner (a generated "
        "expression?))")


@pytest.mark.slow
def test_a_file_too_deep_to_rewrite_is_skipped_and_named(src: Sandbox) -> None:
    rewrite(src, {"speculators/deep.py": b"from vllm.v1.request import Request\nRequest(eos_token_id=1)\n"
                  + DEEP.split(b"\n", 1)[1]})
    r = src.run("--dry-run", "--vllm-version", realdata.REFERENCE_SERIES)
    assert r.returncode == 1
    assert ("speculators/deep.py: skipped: nested too deeply to rewrite (a generated expression?): its calls were "
            "not checked") in r.stderr.splitlines()
    assert r.stderr.splitlines()[-1].endswith("; 1 file skipped")


@pytest.mark.slow
def test_a_codemod_printing_to_stdout_leaves_the_json_and_the_diff_clean(src: Sandbox, tmp_path: Path) -> None:
    from conftest import scoped_codemod_rule

    rules = scoped_codemod_rule(tmp_path, "chatty", "speculators.data_generation.custom_worker",
                                "print('saw', original_node.value); return updated_node", "print('loading')\n")
    dry = src.run("--rules", str(rules), "--dry-run", "--vllm-version", realdata.REFERENCE_SERIES)
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.startswith("--- a/speculators/") and "loading" not in dry.stdout
    assert "loading" in dry.stderr and "saw logging" in dry.stderr
    r = src.run("--rules", str(rules), "--json", "--vllm-version", realdata.REFERENCE_SERIES)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["changed"] is True


def test_the_import_check_accepts_a_namespace_package(tmp_path: Path) -> None:
    site = tmp_path / "site"
    (site / "ns").mkdir(parents=True)
    (site / "ns" / "mod.py").write_text("X = 1\n")
    ok = _import_check({"modules": ["ns.mod"], "own": "ns", "location": str(site)}, str(site))
    assert [(r["module"], r["status"]) for r in ok] == [("ns.mod", "ok")]


@pytest.mark.slow
def test_check_says_when_the_target_imports_another_copy(src: Sandbox, tmp_path: Path) -> None:
    env, _, shadow = _shadow(src, tmp_path)
    assert src.run("--vllm-version", realdata.REFERENCE_SERIES).returncode == 0
    assert src.run("--check", "--vllm-version", realdata.REFERENCE_SERIES).returncode == 0
    r = src.run("--check", "--vllm-version", realdata.REFERENCE_SERIES, env=env)
    assert r.returncode == 1
    assert r.stdout == (f"speculators 0.3.0 in {src.site} is not what runs: the target imports speculators from "
                        f"{shadow}/speculators/__init__.py (a copy earlier on sys.path, e.g. PYTHONPATH or the "
                        "working folder, shadows it); remove that copy from the path\n")
    data = json.loads(src.run("--json", "--check", "--vllm-version", realdata.REFERENCE_SERIES, env=env).stdout)
    assert (data["ok"], data["imported_from_elsewhere"]) == (
        False, [{"package": "speculators", "origin": f"{shadow}/speculators/__init__.py"}])

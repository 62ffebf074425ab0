"""Issue 20, groups 3 and 4: every claim the tool makes is true, every bad input is one line.

Each case was a false "patched"/"passed"/"0 mismatched" or a traceback on the landed tool; the
second half is a second adversarial round of cases of the same kind.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import realdata
from click.testing import CliRunner
from conftest import GENERATOR, Sandbox

from vllm_shim_patch.cli import main

WORKER = "speculators/data_generation/custom_worker.py"
FACING = (GENERATOR, WORKER)  # the vLLM-facing files
ERROR = "patch-speculators: error: "


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
    sandbox.extra = ("--vllm-source", str(realdata.vllm_source("0.16.0")))
    return sandbox


def _rule_file(path: Path, body: str = "    notice: look here\n", rule_id: str = "extra-notice") -> Path:
    path.write_text(f'schema: 1\nrules:\n  - id: {rule_id}\n    call: vllm.v1.request.Request\n'
                    f'    since: "0.1"\n    why: w\n{body}')
    return path


def _cli(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args), prog_name="patch-speculators")
    return result.exit_code, result.stdout, result.stderr


# ---------------------------------------------------------------- group 3 (c): a UTF-8 BOM


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
    r = src.run("--vllm-version", "0.16")
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


# ---------------------------------------------------------------- group 4: tracebacks


def test_python_printing_non_utf8_bytes_is_one_line(tmp_path: Path) -> None:
    liar = tmp_path / "python"
    liar.write_text('#!/bin/sh\nprintf "\\377\\376junk\\n"\n')
    liar.chmod(0o755)
    code, out, err = _cli("--python", str(liar), "status")
    assert (code, out) == (2, "")
    assert err == f"{ERROR}interpreter {str(liar)!r} gave an unreadable answer: '\ufffd\ufffdjunk\\n'\n"


def _deep_example(tmp_path: Path, terms: int = 20_000) -> Path:
    expr = "+".join(["a"] * terms)
    return _rule_file(tmp_path / "deep.yaml", f'    notice: n\n    examples:\n      - before: "x = {expr}"\n'
                                             f'        after: "x = 1"\n')


def test_a_20000_term_rule_example_is_one_line(tmp_path: Path) -> None:
    rules = _deep_example(tmp_path)
    code, _, err = _cli("rules", "check", str(rules))
    assert code == 2
    assert err == (f"{ERROR}{rules}:9: rule 'extra-notice': 'before' is nested too deeply for Python's parser: "
                   "an example is a short hand-written snippet\n")


@pytest.mark.slow
def test_a_20000_term_rule_example_stops_apply_before_anything_is_recorded(sandbox: Sandbox, tmp_path: Path) -> None:
    rules = _deep_example(tmp_path)
    before = sandbox.snapshot()
    r = sandbox.run("--rules", str(rules), "--vllm-version", "0.16")
    assert r.returncode == 2
    assert r.stderr.endswith("'before' is nested too deeply for Python's parser: an example is a short "
                             "hand-written snippet\n")
    assert "Traceback" not in r.stderr
    assert not sandbox.state.exists()
    assert sandbox.snapshot() == before


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


def test_a_fifo_in_a_rules_folder_is_refused_not_waited_on(tmp_path: Path) -> None:
    folder = tmp_path / "rules"
    folder.mkdir()
    _rule_file(folder / "a.yaml")
    os.mkfifo(folder / "b.yaml")
    result: list[tuple[int, str, str]] = []
    worker = threading.Thread(target=lambda: result.append(_cli("--rules", str(folder), "rules", "list")),
                              daemon=True)
    worker.start()
    worker.join(30)
    assert result, "the loader waited on the FIFO"
    code, out, err = result[0]
    assert (code, out) == (2, "")
    assert err == f"{ERROR}{folder}/b.yaml: not a regular file (a FIFO): a rule file is plain text\n"


def test_the_same_rule_file_given_twice_is_loaded_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rules = _rule_file(tmp_path / "a.yaml")
    monkeypatch.chdir(tmp_path)
    code, out, err = _cli("--rules", "a.yaml", "--rules", f"{tmp_path}/../{tmp_path.name}/a.yaml",
                          "--rules", str(tmp_path), "--json", "rules", "list")
    assert code == 0, err
    ids = [r["id"] for r in json.loads(out)]
    assert ids.count("extra-notice") == 1
    assert rules.exists()


# ---------------------------------------------------------------- group 3 (d): --package


@pytest.mark.slow
@pytest.mark.parametrize("args", [["--vllm-version", "0.16"], ["--check", "--vllm-version", "0.16"],
                                  ["--dry-run", "--vllm-version", "0.16"], ["audit"]], ids=" ".join)
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
    r = src.run("--package", "Speculators", "--dry-run", "--vllm-version", "0.16")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("--- a/speculators/")


# ---------------------------------------------------------------- group 3 (e): --dry-run after apply


@pytest.mark.slow
def test_a_dry_run_after_apply_says_nothing_would_be_written(src: Sandbox) -> None:
    first = src.run("--dry-run", "--vllm-version", "0.16")
    assert first.returncode == 0 and first.stdout.count("+++ b/") == 2
    assert src.run("--vllm-version", "0.16").returncode == 0
    again = src.run("--dry-run", "--vllm-version", "0.16")
    assert (again.returncode, again.stdout) == (0, "")
    assert again.stderr.splitlines()[-1] == (
        "speculators 0.3.0 is already patched for vLLM 0.16 (21 edits in 2 files, all installed): apply would "
        "write nothing; patch-speculators diff --installed shows the patch")
    data = json.loads(src.run("--json", "--dry-run", "--vllm-version", "0.16").stdout)
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


# ---------------------------------------------------------------- group 3 (a): a shadow copy on sys.path

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
    r = src.run("--vllm-version", "0.16", env=env)
    assert r.returncode == 1, r.stderr
    assert r.stdout.strip() == (f"verification failed: import speculators.data_generation.custom_worker: {reason}; "
                                "restored 2 files, nothing recorded")
    assert f"import speculators.data_generation.vllm_hidden_states_generator: FAILED: {reason}" in r.stderr
    assert src.snapshot() == before


@pytest.mark.slow
def test_verify_after_apply_names_the_copy_that_was_imported(src: Sandbox, tmp_path: Path) -> None:
    env, reason, _ = _shadow(src, tmp_path)
    assert src.run("--vllm-version", "0.16").returncode == 0
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


# ---------------------------------------------------------------- group 3 (b): --check's "patched"


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
    r = src.run(*args, "--vllm-version", "0.16")
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == (f"{ERROR}speculators 0.3.0 in {src.site} is installed without its source (RECORD lists 44 "
                        ".pyc files and no .py file): the rules rewrite source; reinstall it from its wheel "
                        "(pip install --force-reinstall --no-deps speculators==0.3.0)\n")
    assert not src.state.exists()


@pytest.mark.slow
@pytest.mark.parametrize("applied", [False, True], ids=["unpatched", "after-apply"])
def test_check_with_the_py_files_deleted_is_not_patched(src: Sandbox, applied: bool) -> None:
    if applied:
        assert src.run("--vllm-version", "0.16").returncode == 0
    subprocess.run([str(src.python), "-m", "compileall", "-q", str(src.site / "speculators")], check=True)
    for path in src.site.joinpath("speculators").rglob("*.py"):
        path.unlink()
    r = src.run("--check", "--vllm-version", "0.16")
    assert r.returncode == 1, r.stderr
    assert r.stdout == ("speculators 0.3.0 is not patched for vLLM 0.16: 44 source files RECORD lists are missing "
                        "(speculators/__init__.py, speculators/__main__.py, speculators/config.py, "
                        "speculators/convert/__init__.py, speculators/convert/eagle/__init__.py and 39 more); "
                        "reinstall speculators and patch it again\n")
    assert len(json.loads(src.run("--json", "--check", "--vllm-version", "0.16").stdout)["missing"]) == 44


@pytest.mark.slow
@pytest.mark.parametrize("args", [["--check"], ["--dry-run"], ["audit"], ["audit", "--no-rules"]], ids=" ".join)
def test_an_editable_install_is_not_judged(src: Sandbox, args: list[str]) -> None:
    dist = next(src.site.glob("speculators-*.dist-info"))
    (dist / "direct_url.json").write_text(json.dumps({"url": "file:///src/speculators", "dir_info": {"editable": True}}))
    r = src.run(*args, "--vllm-version", "0.16")
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == (f"{ERROR}speculators is installed in editable mode from file:///src/speculators: "
                        "patch that source checkout with git instead\n")


def _unrecord(sb: Sandbox, path: str) -> None:
    record = next(sb.site.glob("speculators-*.dist-info")) / "RECORD"
    record.write_text("".join(ln for ln in record.read_text().splitlines(keepends=True) if not ln.startswith(path + ",")))


@pytest.mark.slow
def test_a_file_missing_from_record_where_a_rule_applies_is_not_patched(src: Sandbox) -> None:
    _unrecord(src, WORKER)
    r = src.run("--vllm-version", "0.16")
    assert r.returncode == 1, r.stderr
    assert (f"note: the rules apply to 1 file RECORD does not list, which apply does not edit: {WORKER} "
            "(worker-request-tracking, worker-no-eagle3-gate, worker-capture-hooks); "
            "reinstall speculators so RECORD lists it"
            ) in r.stderr.splitlines()
    check = src.run("--check", "--vllm-version", "0.16")
    assert check.returncode == 1
    assert check.stdout == (f"speculators 0.3.0 is not patched for vLLM 0.16: the rules apply to 1 file RECORD does "
                            f"not list, which apply never edits: {WORKER} (worker-request-tracking, "
                            "worker-no-eagle3-gate, worker-capture-hooks); reinstall "
                            "speculators so RECORD lists it\n")


@pytest.mark.slow
def test_an_unrecorded_file_no_rule_touches_does_not_matter(src: Sandbox) -> None:
    (src.site / "speculators" / "local_notes.py").write_text("NOTE = 'mine'\n")
    assert src.run("--vllm-version", "0.16").returncode == 0
    assert src.run("--check", "--vllm-version", "0.16").returncode == 0


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
    assert src.run("--vllm-version", "0.16").returncode == 0
    pyc = _pyc(src, original, WORKER, "CHECKED_HASH")
    assert src.run("--check", "--vllm-version", "0.16").returncode == 0  # Python checks it: harmless
    _pyc(src, original, WORKER, "UNCHECKED_HASH")
    r = src.run("--check", "--vllm-version", "0.16")
    assert r.returncode == 1
    rel = pyc.relative_to(src.site)
    assert r.stdout == ("speculators 0.3.0 is patched for vLLM 0.16, but Python runs 1 unchecked-hash .pyc file "
                        f"instead of the patched source ({rel}): delete it\n")
    # Compiled from the patched bytes it is current: nothing to say.
    _pyc(src, (src.site / WORKER).read_bytes(), WORKER, "UNCHECKED_HASH")
    assert src.run("--check", "--vllm-version", "0.16").returncode == 0


@pytest.mark.slow
def test_bytecode_apply_cannot_delete_is_reported(src: Sandbox) -> None:
    original = (src.site / WORKER).read_bytes()
    pyc = _pyc(src, original, WORKER, "UNCHECKED_HASH")
    cache = pyc.parent
    subprocess.run(["chattr", "+i", str(cache)], check=True)
    try:
        r = src.run("--vllm-version", "0.16")
    finally:
        subprocess.run(["chattr", "-i", str(cache)], check=True)
    rel = pyc.relative_to(src.site)
    assert r.returncode == 1, r.stderr
    lines = r.stderr.splitlines()
    assert (f"note: could not delete stale bytecode {rel}: unchecked-hash bytecode, which Python runs instead of "
            "the patched source: delete it") in lines
    gen = [ln for ln in lines if "vllm_hidden_states_generator" in ln and ln.startswith("note: could not delete")]
    assert gen and all(ln.endswith("Python checks it against the patched source, so it will not run") for ln in gen)
    assert src.run("--check", "--vllm-version", "0.16").returncode == 1


# ---------------------------------------------------------------- a second adversarial round


def _script(tmp_path: Path, body: str, name: str = "python") -> Path:
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


@pytest.mark.slow
def test_python_printing_a_banner_before_the_answer_is_one_line(sandbox: Sandbox, tmp_path: Path) -> None:
    wrapper = _script(tmp_path, f'echo "activating env"\nexec {sandbox.python} "$@"\n')
    code, out, err = _cli("--python", str(wrapper), "--json", "status")
    assert code == 2
    assert err.startswith(f"{ERROR}interpreter {str(wrapper)!r} gave an unreadable answer: 'activating env\\n{{")
    assert err.count("\n") == 1
    assert json.loads(out)["kind"] == "TargetError"


def test_python_that_is_not_executable_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "python"
    path.write_text("print(1)\n")
    assert _cli("--python", str(path), "status") == (2, "", f"{ERROR}interpreter {str(path)!r} is not executable\n")


def test_python_that_never_answers_times_out_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from vllm_shim_patch import target

    monkeypatch.setattr(target, "PROBE_TIMEOUT", 1.0)
    hangs = _script(tmp_path, "exec sleep 30\n")
    assert _cli("--python", str(hangs), "status") == (
        2, "", f"{ERROR}interpreter {str(hangs)!r} did not answer within 1s\n")


@pytest.mark.slow
def test_a_package_without_record_is_one_line(sandbox: Sandbox) -> None:
    (next(sandbox.site.glob("speculators-*.dist-info")) / "RECORD").unlink()
    r = sandbox.run("--check", "--vllm-version", "0.16")
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == (f"{ERROR}speculators 0.3.0 in {sandbox.python} has no RECORD: not installed by a wheel "
                        "installer\n")


@pytest.mark.parametrize(
    "mangle",
    [
        pytest.param(lambda text: "\ufeff" + text, id="bom"),
        pytest.param(lambda text: text.replace("\n", "\r\n"), id="crlf"),
    ],
)
def test_a_rule_file_with_a_bom_or_crlf_loads(tmp_path: Path, mangle: object) -> None:
    rules = _rule_file(tmp_path / "a.yaml")
    rules.write_bytes(mangle(rules.read_text()).encode())  # type: ignore[operator]
    code, out, err = _cli("--rules", str(rules), "--json", "rules", "list")
    assert code == 0, err
    assert "extra-notice" in [r["id"] for r in json.loads(out)]


def test_a_rule_file_indented_with_tabs_is_one_line(tmp_path: Path) -> None:
    rules = _rule_file(tmp_path / "a.yaml")
    rules.write_text(rules.read_text().replace("\n  - id", "\n\t- id"))
    assert _cli("--rules", str(rules), "rules", "list") == (
        2, "", f"{ERROR}{rules}:3: YAML syntax error: found character '\\t' that cannot start any token\n")


def test_rule_paths_that_are_no_files(tmp_path: Path) -> None:
    loop = tmp_path / "loop.yaml"
    loop.symlink_to(loop)
    assert _cli("--rules", str(loop), "rules", "list") == (
        2, "", f"{ERROR}{loop}: a symbolic link to nothing (or a loop of links)\n")
    folder = tmp_path / "rules"
    (folder / "nested.yaml").mkdir(parents=True)
    assert _cli("--rules", str(folder), "rules", "list") == (
        2, "", f"{ERROR}{folder}/nested.yaml: not a regular file (a folder): a rule file is plain text\n")
    assert _cli("--rules", "/dev/null", "rules", "list") == (
        2, "", f"{ERROR}/dev/null: not a regular file (a device or socket): a rule file is plain text\n")
    (folder / "nested.yaml").rmdir()
    (folder / "gone.yaml").symlink_to(tmp_path / "nowhere.yaml")
    assert _cli("--rules", str(folder), "rules", "list") == (
        2, "", f"{ERROR}{folder}/gone.yaml: cannot read: No such file or directory\n")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        pytest.param("    add:\n      x: " + "+".join(["a"] * 20_000) + "\n", "'add' 'x': {v!r} is not a single Python "
                     "expression", id="add-value"),
        pytest.param('    signature: "(a=' + "+".join(["a"] * 20_000) + ')"\n    drop: [a]\n',
                     "'signature' {s!r} is not a parameter list like (a, b, c=None)", id="signature"),
    ],
)
def test_a_20000_term_operation_value_is_one_line(tmp_path: Path, body: str, message: str) -> None:
    rules = _rule_file(tmp_path / "a.yaml", body)
    code, out, err = _cli("rules", "check", str(rules))
    assert (code, out) == (2, "")
    value = "+".join(["a"] * 20_000)
    assert err.startswith(f"{ERROR}{rules}:")
    shown = f"(a={value})"[:77] + "..."  # a long value is cut, the line stays readable
    assert err.endswith(message.format(v=value, s=shown) + "\n")
    assert err.count("\n") == 1


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
    assert src.run("--vllm-version", "0.16").returncode == 0
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
    r = src.run("--dry-run", "--vllm-version", "0.16")
    assert r.returncode == 1
    assert ("speculators/deep.py: skipped: nested too deeply to rewrite (a generated expression?): its calls were "
            "not checked") in r.stderr.splitlines()
    assert r.stderr.splitlines()[-1].endswith("; 1 file skipped")


@pytest.mark.slow
def test_a_codemod_printing_to_stdout_leaves_the_json_and_the_diff_clean(src: Sandbox, tmp_path: Path) -> None:
    from conftest import scoped_codemod_rule

    rules = scoped_codemod_rule(tmp_path, "chatty", "speculators.data_generation.custom_worker",
                                "print('saw', original_node.value); return updated_node", "print('loading')\n")
    dry = src.run("--rules", str(rules), "--dry-run", "--vllm-version", "0.16")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.startswith("--- a/speculators/") and "loading" not in dry.stdout
    assert "loading" in dry.stderr and "saw logging" in dry.stderr
    r = src.run("--rules", str(rules), "--json", "--vllm-version", "0.16")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["changed"] is True


@pytest.mark.parametrize("value", ["", " "], ids=["empty", "blank"])
def test_an_empty_python_never_falls_back_to_the_tools_own(value: str) -> None:
    # `--python "$ENV_PY"` with the variable unset patched the tool's own environment's package.
    message = "--python is empty: give the path of the ML environment's python (or its venv folder)"
    code, out, err = _cli("--python", value, "--json", "--check", "--vllm-version", "0.16")
    assert (code, err) == (2, f"{ERROR}{message}\n")
    assert json.loads(out) == {"ok": False, "error": message, "kind": "UsageError"}


@pytest.mark.parametrize(("body", "how"), [("exit 3\n", "exit 3"), ("kill -9 $$\n", "killed by signal 9")],
                         ids=["exit-3", "sigkill"])
def test_python_that_dies_silently_says_how(tmp_path: Path, body: str, how: str) -> None:
    dies = _script(tmp_path, body)
    assert _cli("--python", str(dies), "status") == (
        2, "", f"{ERROR}interpreter {str(dies)!r} failed to run the probe: (no output, {how})\n")


def test_the_import_check_accepts_a_namespace_package(tmp_path: Path) -> None:
    site = tmp_path / "site"
    (site / "ns").mkdir(parents=True)
    (site / "ns" / "mod.py").write_text("X = 1\n")
    ok = _import_check({"modules": ["ns.mod"], "own": "ns", "location": str(site)}, str(site))
    assert [(r["module"], r["status"]) for r in ok] == [("ns.mod", "ok")]


def test_a_rule_example_too_deep_for_libcst_fails_its_test_in_one_line(tmp_path: Path) -> None:
    expr = "+".join(["a"] * 900)  # Python's parser takes it; libcst's visitors do not
    rules = _rule_file(tmp_path / "a.yaml", f'    drop: [eos_token_id]\n    examples:\n      - before: "from '
                       f'vllm.v1.request import Request\\nRequest(eos_token_id={expr})"\n        after: "from '
                       f'vllm.v1.request import Request\\nRequest()"\n', rule_id="deep")
    code, out, err = _cli("rules", "test", str(rules))
    assert (code, err) == (1, "")
    assert f"FAIL deep-example-1 ({rules}): skipped: nested too deeply to rewrite (a generated expression?): its " \
           "calls were not checked" in out.splitlines()
    assert out.splitlines()[-1] == "1 example ok, 1 failing"


def test_an_empty_package_key_is_one_line(tmp_path: Path) -> None:
    rules = tmp_path / "a.yaml"
    rules.write_text('schema: 1\npackage: ""\nrules:\n  - id: x\n    call: vllm.a.B\n    since: "0.1"\n'
                     "    why: w\n    notice: n\n")
    assert _cli("rules", "check", str(rules)) == (2, "", f"{ERROR}{rules}:2: 'package' must name a distribution\n")


def test_a_rule_file_for_another_package_admits_it(tmp_path: Path) -> None:
    from vllm_shim_patch.rules.loader import load_pack

    rules = tmp_path / "a.yaml"
    rules.write_text('schema: 1\npackage: My_Plugin\nrules:\n  - id: x\n    call: vllm.a.B\n    since: "0.1"\n'
                     "    why: w\n    notice: n\n")
    pack = load_pack([rules])
    assert pack.packages == ("speculators", "My_Plugin")
    assert pack.targets("my-plugin") and pack.targets("Speculators") and not pack.targets("pip")


@pytest.mark.slow
def test_check_says_when_the_target_imports_another_copy(src: Sandbox, tmp_path: Path) -> None:
    env, _, shadow = _shadow(src, tmp_path)
    assert src.run("--vllm-version", "0.16").returncode == 0
    assert src.run("--check", "--vllm-version", "0.16").returncode == 0
    r = src.run("--check", "--vllm-version", "0.16", env=env)
    assert r.returncode == 1
    assert r.stdout == (f"speculators 0.3.0 in {src.site} is not what runs: the target imports speculators from "
                        f"{shadow}/speculators/__init__.py (a copy earlier on sys.path, e.g. PYTHONPATH or the "
                        "working folder, shadows it); remove that copy from the path\n")
    data = json.loads(src.run("--json", "--check", "--vllm-version", "0.16", env=env).stdout)
    assert (data["ok"], data["imported_from_elsewhere"]) == (
        False, [{"package": "speculators", "origin": f"{shadow}/speculators/__init__.py"}])

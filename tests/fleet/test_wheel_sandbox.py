"""`patch-speculators wheel` on sandboxes holding the real speculators 0.3.0 and 0.4.0.1 wheels,
guarded by the real vLLM 0.16.0 source: built twice byte-identical; installed into fresh venvs by
pip and by uv, its files are the overlay's patched ones and RECORD verifies; `--check` exits 0
for its series and 1 for another; a hand edit is drift; rollback reinstalls the release; and
every bad input is one line, nothing written."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import realdata
from conftest import EDITS
from conftest import GENERATOR, WORKER, Sandbox, _make_venv

from vllm_shim_patch.fleet import record
from vllm_shim_patch.fsutil import record_hash

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("fleet-wheel")]

UV = Path(sys.executable).parent / "uv"


def _isolated(tmp_path: Path) -> dict[str, str]:
    """No pip or uv cache of the user's, no pip configuration: the original wheel is found where
    the installer recorded it, or not at all."""
    (tmp_path / "pip-cache").mkdir(exist_ok=True)
    (tmp_path / "uv-cache").mkdir(exist_ok=True)
    return {"PIP_CACHE_DIR": str(tmp_path / "pip-cache"), "UV_CACHE_DIR": str(tmp_path / "uv-cache"),
            "PIP_CONFIG_FILE": "/dev/null", "PIP_FIND_LINKS": "", "PIP_EXTRA_INDEX_URL": ""}


def _box(tmp_path: Path, release: str) -> tuple[Sandbox, Path]:
    wheel = realdata.speculators_wheel(release)
    root = tmp_path / "box"
    _make_venv(root, wheel)
    site = next(root.glob("lib/python3*/site-packages"))
    return Sandbox(root, root / "bin" / "python", site, tmp_path / "state"), wheel


def _fresh(tmp_path: Path, name: str) -> Sandbox:
    root = tmp_path / name
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    site = next(root.glob("lib/python3*/site-packages"))
    return Sandbox(root, root / "bin" / "python", site, tmp_path / f"{name}-state")


def _members(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as zf:
        return {n: zf.read(n) for n in zf.namelist()}


def _record_verifies(sb: Sandbox) -> list[str]:
    """The files whose bytes differ from the RECORD the installer wrote (pip check does not look)."""
    dist = next(sb.site.glob("speculators-*.dist-info"))
    rows = record.read((dist / "RECORD").read_bytes())
    return [r.path for r in rows if r.hash and record_hash((sb.site / r.path).read_bytes()) != r.hash]


@pytest.mark.parametrize(("release", "edits"), [("0.3.0", f"{EDITS} edits in 2 files"), ("0.4.0.1", "5 edits in 2 files")])
def test_the_wheel_installs_everywhere_and_check_recognises_it(
        tmp_path: Path, reference_vllm_source: Path, release: str, edits: str) -> None:
    sb, original = _box(tmp_path, release)
    src = ["--vllm-source", str(reference_vllm_source)]
    applied = sb.run(*src, "--vllm-version", realdata.REFERENCE_SERIES)
    assert applied.returncode == 0, applied.stderr
    assert f"patched speculators {release} for vLLM 0.16: {edits}" in applied.stdout
    patched = sb.snapshot()
    out1, out2 = tmp_path / "one", tmp_path / "two"
    first = sb.run(*src, "wheel", "--vllm-version", realdata.REFERENCE_SERIES, "--no-index", "-o", str(out1), "--json",
                   env=_isolated(tmp_path))
    assert first.returncode == 0, first.stderr
    second = sb.run(*src, "wheel", "--vllm-version", realdata.REFERENCE_SERIES, "--wheel", str(original), "-o", str(out2))
    assert second.returncode == 0, second.stderr
    name = f"speculators-{release}+vsp.vllm0.16-py3-none-any.whl"
    data = json.loads(first.stdout)["wheel"]
    built = out1 / name
    assert sorted(p.name for p in out1.iterdir()) == [name]
    assert (built.read_bytes(), data["sha256"], data["file"]) == (
        (out2 / name).read_bytes(), hashlib.sha256(built.read_bytes()).hexdigest(), str(built))
    assert data["original"] == f"the wheel it was installed from ({original})"
    assert (data["version"], data["series"], data["requires"], data["built_for"], data["signatures"]) == (
        f"{release}+vsp.vllm0.16", "0.16", "vllm==0.16.*", "0.16.0", "static")
    assert data["files"] == [WORKER, GENERATOR]
    assert second.stdout == (
        f"wrote {out2 / name} (sha256 {data['sha256']}): speculators {release} patched for vLLM 0.16 (requires "
        f"vllm==0.16.*; guards read vLLM 0.16.0, static signatures), {len(data['rules'])} rules in 2 files, "
        f"rehearsal not run (no vLLM in the target); from the patch applied here\n")
    members = _members(built)
    published = _members(original)
    for path, content in published.items():
        if ".dist-info/" not in path:
            assert members[path] == (patched[path] if path in data["files"] else content), path
    for kind, install in (("pip", [sys.executable, "-m", "pip", "--python"]), ("uv", [str(UV), "pip", "install",
                                                                                      "--python"])):
        box = _fresh(tmp_path, kind)
        command = ([*install, str(box.python), "install", "--quiet", "--no-deps", str(built)] if kind == "pip"
                   else [*install, str(box.python), "--quiet", "--no-deps", str(built)])
        # An isolated uv cache: uv links its cache's copy into the venv, so the hand edit below
        # would be written into the user's cache (and installed by every later run).
        subprocess.run(command, check=True, capture_output=True, env={**os.environ, **_isolated(tmp_path / kind)})
        assert _record_verifies(box) == [], kind
        for path in data["files"]:
            assert (box.site / path).read_bytes() == patched[path], (kind, path)
        who = f"speculators {release}+vsp.vllm0.16"
        wheel_words = (f"installed from the patched wheel {who} for vLLM 0.16, built for vLLM 0.16.0 by "
                       f"vllm-shim-patch 0.1.0: {len(data['rules'])} rules in 2 files, rehearsal not run (no vLLM in "
                       f"the target)")
        ok = box.run("--check", "--vllm-version", realdata.REFERENCE_SERIES)
        assert (ok.returncode, ok.stdout) == (0, f"{who} is patched ({wheel_words}; RECORD verified; vLLM 0.16 asked "
                                                 f"for, in its series; no vLLM here to plan the bytes against "
                                                 f"(--vllm-source does))\n"), (kind, ok.stderr)
        replanned = box.run(*src, "--check", "--vllm-version", realdata.REFERENCE_SERIES)
        assert (replanned.returncode, replanned.stdout.splitlines()[-1]) == (
            0, f"{who} is patched ({wheel_words}; RECORD verified; the rules plan the same bytes for the vLLM "
               f"source {reference_vllm_source} (0.16.0))"), (kind, replanned.stderr)
        other = box.run("--check", "--vllm-version", "0.17")
        assert (other.returncode, other.stdout) == (
            1, f"{who} is not patched for vLLM 0.17: it was installed from the patched wheel for vLLM 0.16 "
               f"(vllm==0.16.*), and --vllm-version is vLLM 0.17; install the wheel built for that series "
               f"(patch-speculators wheel --vllm-version 0.17 on a box with it), or pin vllm==0.16.*\n"), kind
        shown = json.loads(box.run("diff", "--installed", "--json").stdout)
        assert [f["path"] for f in shown["files"]] == data["files"], kind
        status = json.loads(box.run("status", "--json").stdout)
        assert (status["state"], status["wheel"]["series"], status["files"]) == ("patched", "0.16", []), kind
        if kind == "pip":
            # Issue 40, item 4: a dry run here diffs against what is installed (the wheel's patch),
            # never against the originals: with a rule left out, the diff takes its edit back and
            # `patch -p1` applies it to the box as it is.
            rule = data["rules"][0]
            dry = box.run(*src, "--vllm-version", realdata.REFERENCE_SERIES, "--dry-run", "--skip", rule)
            assert dry.returncode == 0 and dry.stdout.startswith("--- a/"), (dry.stdout, dry.stderr)
            assert dry.stderr.splitlines()[-1].startswith(
                "the diff is against the files installed from the patched wheel for vLLM 0.16 ("), dry.stderr
            fits = subprocess.run(["patch", "-p1", "--dry-run", "-d", str(box.site)], input=dry.stdout, text=True,
                                  capture_output=True)
            assert fits.returncode == 0, fits.stdout + fits.stderr
        # A hand edit after the install: drift, from the RECORD the installer wrote.
        (box.site / WORKER).write_bytes((box.site / WORKER).read_bytes() + b"# edited by hand\n")
        drift = box.run("--check", "--vllm-version", realdata.REFERENCE_SERIES)
        assert (drift.returncode, drift.stdout) == (
            1, f"{who} has drifted: 1 file differs from the RECORD of the patched wheel it was installed from "
               f"({WORKER}; edited after the install?); reinstall it: pip install --force-reinstall --no-deps "
               f"'speculators=={release}+vsp.vllm0.16'\n"), kind
        assert box.run("status").stdout == (f"drifted: {who}, {wheel_words}; 1 file differs from its RECORD (edited "
                                            f"after the install?): {WORKER}\n"), kind
        # Issue 40, item 2: a wheel install keeps no overlay, so rollback would lose the edit:
        # refused, naming the file, the edit left in place; reinstalling the wheel lets it run.
        edited = (box.site / WORKER).read_bytes()
        refused = box.run("rollback")
        assert (refused.returncode, refused.stdout) == (
            1, f"{who} has edits the rollback would lose: 1 file differs from the RECORD of the patched wheel it "
               f"was installed from ({WORKER}), and a wheel install keeps no overlay to save it in; copy it away, "
               f"then reinstall the wheel (pip install --force-reinstall --no-deps 'speculators=={release}+vsp."
               f"vllm0.16') and run rollback again; nothing was changed\n"), kind
        assert (box.site / WORKER).read_bytes() == edited, kind
        # With pip from the wheel file (uv may link its cache's copy in: the hand edit went there too).
        subprocess.run([sys.executable, "-m", "pip", "--python", str(box.python), "install", "--quiet", "--no-deps",
                        "--force-reinstall", str(built)], check=True, capture_output=True)
        # The release as published comes back, RECORD-exact, from the originals the wheel keeps.
        back = box.run("rollback")
        assert back.returncode == 0, (kind, back.stdout, back.stderr)
        assert back.stdout.startswith(f"rolled back {who} to speculators {release} as released: reinstalled it"), kind
        rows = {p: d for p, d in published.items() if not p.endswith("/RECORD")}
        for path, content in rows.items():
            assert (box.site / path).read_bytes() == content, (kind, path)
        assert box.run("status").stdout == (f"not tracked: speculators {release} was never patched by this tool; "
                                            f"files match RECORD\n"), kind


def test_apply_wheel_out_writes_the_same_wheel(tmp_path: Path, sandbox: Sandbox, reference_vllm_source: Path,
                                               speculators_wheel: Path) -> None:
    src = ["--vllm-source", str(reference_vllm_source)]
    out = tmp_path / "fleet"
    applied = sandbox.run(*src, "--vllm-version", realdata.REFERENCE_SERIES, "--wheel-out", str(out), "--wheel", str(speculators_wheel),
                          "--json")
    assert applied.returncode == 0, applied.stderr
    data = json.loads(applied.stdout)
    assert data["changed"] is True
    wheel = Path(data["wheel"]["file"])
    assert wheel == out / "speculators-0.3.0+vsp.vllm0.16-py3-none-any.whl"
    assert data["wheel"]["sha256"] == hashlib.sha256(wheel.read_bytes()).hexdigest()
    again = sandbox.run(*src, "wheel", "--vllm-version", realdata.REFERENCE_SERIES, "--wheel", str(speculators_wheel),
                        "-o", str(tmp_path / "again"))
    assert again.returncode == 0, again.stderr
    assert (tmp_path / "again" / wheel.name).read_bytes() == wheel.read_bytes()


def test_bad_inputs_are_one_line_and_write_nothing(tmp_path: Path, sandbox: Sandbox, reference_vllm_source: Path,
                                                   speculators_wheel: Path) -> None:
    src = ["--vllm-source", str(reference_vllm_source)]
    out = tmp_path / "out"
    before = sandbox.snapshot()
    # Not patched, and no vLLM to rehearse on.
    r = sandbox.run(*src, "wheel", "--vllm-version", realdata.REFERENCE_SERIES, "--wheel", str(speculators_wheel), "-o", str(out))
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == (
        f"patch-speculators: error: speculators 0.3.0 is not patched here, and no rehearsal is possible (no vLLM "
        f"installed in {sandbox.python}): apply the patch first (the wheel then carries its verdict), build where the "
        f"target's vLLM is installed, or pass --no-rehearse to build from a scratch copy verified without a "
        f"rehearsal; nothing was written\n")
    j = sandbox.run(*src, "wheel", "--vllm-version", realdata.REFERENCE_SERIES, "--wheel", str(speculators_wheel), "-o", str(out),
                    "--json")
    assert j.returncode == 2 and json.loads(j.stdout)["kind"] == "UsageError"
    assert list(out.iterdir()) == [] and sandbox.snapshot() == before
    # An output folder that cannot be written.
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    bad = sandbox.run(*src, "wheel", "-o", str(blocker / "sub"), "--json")
    assert bad.returncode == 2
    assert json.loads(bad.stdout) == {"ok": False, "kind": "UsageError", "error": (
        f"-o {blocker / 'sub'}: cannot write a file in {blocker / 'sub'} (Not a directory); nothing was written")}
    # Another release's wheel as the original.
    other = realdata.speculators_wheel("0.4.0")
    assert sandbox.run(*src, "--vllm-version", realdata.REFERENCE_SERIES).returncode == 0
    w = sandbox.run(*src, "wheel", "--vllm-version", realdata.REFERENCE_SERIES, "--wheel", str(other), "-o", str(out))
    assert w.returncode == 2
    assert w.stderr.startswith(f"patch-speculators: error: --wheel {other}: it holds no speculators-0.3.0.dist-info/RECORD;")
    # Drift: a patched file edited by hand after apply.
    (sandbox.site / WORKER).write_bytes((sandbox.site / WORKER).read_bytes() + b"# by hand\n")
    d = sandbox.run(*src, "wheel", "--vllm-version", realdata.REFERENCE_SERIES, "--wheel", str(speculators_wheel), "-o", str(out),
                    "--json")
    assert d.returncode == 1
    assert json.loads(d.stdout) == {"ok": False, "kind": "Refused", "error": (
        f"speculators 0.3.0: 1 file differs from the overlay's patched state ({WORKER}): a wheel of it would carry "
        f"edits no rule made; run rollback (the edits are kept in the overlay's history) and apply again, or status "
        f"to see them; nothing was written")}
    assert list(out.iterdir()) == []


def test_a_scratch_copy_without_the_rehearsal_leaves_the_target_as_it_is(
        tmp_path: Path, sandbox: Sandbox, reference_vllm_source: Path, speculators_wheel: Path) -> None:
    before = sandbox.snapshot()
    r = sandbox.run("--vllm-source", str(reference_vllm_source), "wheel", "--vllm-version", realdata.REFERENCE_SERIES, "--no-rehearse",
                    "--wheel", str(speculators_wheel), "-o", str(tmp_path / "out"), "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)["wheel"]
    assert data["from"] == "a scratch copy patched and verified here (not rehearsed)"
    assert data["rehearsal"]["outcome"] == "not run (no vLLM in the target)"
    assert sandbox.snapshot() == before and not sandbox.state.exists()
    meta = _members(Path(data["file"]))["speculators-0.3.0+vsp.vllm0.16.dist-info/METADATA"].decode()
    assert "Requires-Dist: vllm==0.16.*\n" in meta and 'Requires-Dist: vllm==0.16.*; extra == "datagen"\n' in meta
    assert io.StringIO(meta).read().count("Requires-Dist: vllm") == 2


def test_all_series_builds_what_it_has_sources_for_and_names_the_rest(
        tmp_path: Path, sandbox: Sandbox, reference_vllm_source: Path, speculators_wheel: Path) -> None:
    from vllm_shim_patch.fleet.rehearsed import releases

    sources = tmp_path / "sources"
    sources.mkdir()
    (sources / f"vllm-{realdata.REFERENCE_VLLM}").symlink_to(reference_vllm_source)
    # Issue 40, item 8: one source whose version is no version costs nothing but itself, named.
    evil = sources / "evil"
    (evil / "vllm").mkdir(parents=True)
    (evil / "vllm" / "__init__.py").write_text("")
    (evil / "vllm-0.0.0.dist-info").mkdir()
    (evil / "vllm-0.0.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: ../../../etc\n")
    r = sandbox.run("wheel", "--all-series", "--vllm-sources", str(sources), "--wheel", str(speculators_wheel),
                    "-o", str(tmp_path / "all"), "--json")
    assert r.returncode == 1, r.stderr
    data = json.loads(r.stdout)
    assert data["sources_ignored"] == [{"path": str(evil),
                                        "why": "the version it carries, '../../../etc', is not a version"}]
    assert [w["name"] for w in data["wheels"]] == ["speculators-0.3.0+vsp.vllm0.16-py3-none-any.whl"]
    assert data["wheels"][0]["matrix"].endswith("records speculators 0.3.0 on vLLM 0.16.0: apply and rehearsal "
                                                "(the parity workload) passed, rollback RECORD-exact")
    others = [".".join(v.split(".")[:2]) for v in releases("0.3.0") if not v.startswith(f"{realdata.REFERENCE_SERIES}.")]
    assert data["not_built"] == [{"series": s, "why": f"no vLLM {s}.x source in {sources}"} for s in others]
    # The same inputs by another route (one series, a scratch copy): the same bytes.
    one = sandbox.run("--vllm-source", str(reference_vllm_source), "wheel", "--vllm-version", realdata.REFERENCE_SERIES, "--no-rehearse",
                      "--wheel", str(speculators_wheel), "-o", str(tmp_path / "one"))
    assert one.returncode == 0, one.stderr
    name = data["wheels"][0]["name"]
    assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "all" / name).read_bytes()
    assert sandbox.run("wheel", "--all-series", "-o", str(tmp_path / "x")).stderr == (
        "patch-speculators: error: --all-series needs --vllm-sources DIR: a folder with one vLLM source folder or "
        "wheel per release to build for (the installed vLLM's own series needs none)\n")


def test_wheel_out_whose_wheel_name_is_a_folder_is_refused_before_anything_is_written(
        tmp_path: Path, sandbox: Sandbox, reference_vllm_source: Path, speculators_wheel: Path) -> None:
    """Issue 40, item 3: the wheel could not be renamed into place, so apply must not patch first
    (it wrote and committed, then said "nothing was written")."""
    src = ["--vllm-source", str(reference_vllm_source)]
    out = tmp_path / "fleet"
    taken = out / "speculators-0.3.0+vsp.vllm0.16-py3-none-any.whl"
    (taken / "inside").mkdir(parents=True)
    before = sandbox.snapshot()
    r = sandbox.run(*src, "--vllm-version", realdata.REFERENCE_SERIES, "--wheel-out", str(out), "--wheel", str(speculators_wheel),
                    "--json")
    message = (f"--wheel-out {out}: {taken} is a folder, where the wheel would be written: move it away and run "
               f"again; nothing was written")
    assert (r.returncode, r.stderr) == (2, f"patch-speculators: error: {message}\n")
    assert json.loads(r.stdout) == {"ok": False, "error": message, "kind": "UsageError"}
    assert sandbox.snapshot() == before
    assert not sandbox.state.exists() or not list(sandbox.state.glob("*/git"))

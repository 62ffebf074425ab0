"""The patched wheel from a fixture wheel: names, METADATA, RECORD, the kept originals, and the
same bytes from the same inputs."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import pytest
from fixture import DIST_INFO, GENERATOR, PATCHED, WORKER, original_files

from vllm_shim_patch.errors import UsageError
from vllm_shim_patch.fleet import archive, build, metadata, record
from vllm_shim_patch.fleet.provenance import Provenance, Rehearsal
from vllm_shim_patch.fsutil import record_hash

NEW = "speculators-0.4.0+vsp.vllm0.33.dist-info"


def facts(**more: object) -> build.Facts:
    base = dict(series="0.33", built_for="0.33.0", signatures="static", rules=("worker-capture-hooks",),
                rules_digest="sha256:" + "0" * 64, verification="passed: 1 import ok",
                rehearsal=Rehearsal("passed", "rehearsal passed: 6 calls", "LlamaForCausalLM (default)", "world size 1"),
                vllm_requires=["torch==2.14.0", "transformers<5.21.0,>=5.16.1"], tool="vllm-shim-patch 0.1.0",
                explain=lambda r: f"vLLM 0.33.0 requires {r.name}{r.vllm_requires}")
    base.update(more)
    return build.Facts(**base)  # type: ignore[arg-type]


def members(data: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        return {n: zf.read(n) for n in zf.namelist()}


def test_the_wheel_holds_the_patched_bytes_and_the_rest_as_published() -> None:
    built = build.build(original_files(), PATCHED, facts())
    assert built.name == "speculators-0.4.0+vsp.vllm0.33-py3-none-any.whl"
    files = members(built.data)
    assert files[WORKER] == PATCHED[WORKER]
    assert files[GENERATOR] == original_files()[GENERATOR]
    with zipfile.ZipFile(io.BytesIO(built.data)) as zf:
        names = zf.namelist()
        infos = zf.infolist()
    assert names == [
        "speculators/__init__.py", WORKER, GENERATOR,
        f"{NEW}/METADATA", f"{NEW}/WHEEL", f"{NEW}/entry_points.txt", f"{NEW}/licenses/LICENSE", f"{NEW}/top_level.txt",
        f"{NEW}/vsp/original/{DIST_INFO}/METADATA.orig", f"{NEW}/vsp/original/{DIST_INFO}/RECORD.orig",
        f"{NEW}/vsp/original/{WORKER}.orig", f"{NEW}/vsp/patch.json", f"{NEW}/RECORD",
    ]
    assert {i.date_time for i in infos} == {(1980, 1, 1, 0, 0, 0)}
    assert {i.external_attr >> 16 for i in infos} == {0o100644}
    assert {i.compress_type for i in infos} == {zipfile.ZIP_DEFLATED}
    assert files[f"{NEW}/vsp/original/{WORKER}.orig"] == original_files()[WORKER]


def test_record_lists_every_member_with_its_hash() -> None:
    files = members(build.build(original_files(), PATCHED, facts()).data)
    rows = record.read(files[f"{NEW}/RECORD"])
    assert [r.path for r in rows] == [n for n in files]  # every member, in the archive's order, RECORD last
    assert rows[-1] == record.Row(f"{NEW}/RECORD", "", "")
    for row in rows[:-1]:
        assert row.hash == record_hash(files[row.path]) and row.size == str(len(files[row.path]))


def test_metadata_says_what_the_wheel_carries() -> None:
    built = build.build(original_files(), PATCHED, facts())
    text = members(built.data)[f"{NEW}/METADATA"].decode()
    parsed = metadata.parse(text)
    assert parsed.value("Version") == "0.4.0+vsp.vllm0.33"
    assert parsed.values("Requires-Dist") == [
        "click", "torch>=2.9.0", "transformers>=4.56.1", "vllm==0.33.*", 'pytest~=8.2.2; extra == "dev"',
        'vllm==0.33.*; extra == "datagen"']
    # Every other header as published, in its place.
    assert [raw for _, raw in parsed.fields if not raw.startswith(("Version:", "Requires-Dist:"))] == \
        [raw for _, raw in metadata.parse(original_files()[f"{DIST_INFO}/METADATA"].decode()).fields
         if not raw.startswith(("Version:", "Requires-Dist:"))]
    assert [n for n, _ in parsed.fields] == [
        "Metadata-Version", "Name", "Version", "Summary", "Requires-Python", "Description-Content-Type", "License-File",
        "Requires-Dist", "Requires-Dist", "Requires-Dist", "Requires-Dist", "Provides-Extra", "Requires-Dist",
        "Provides-Extra", "Requires-Dist"]
    assert parsed.body is not None
    assert parsed.body.endswith("---\n\n# Speculators\n\nThe description.\n")
    assert parsed.body.splitlines()[:9] == [
        "**speculators 0.4.0 patched by vllm-shim-patch 0.1.0 for vLLM 0.33** (`0.4.0+vsp.vllm0.33`, requires "
        "`vllm==0.33.*`; its guards read vLLM 0.33.0's static signatures).",
        "",
        f"- Rules (1 rule, digest `sha256:{'0' * 64}`): worker-capture-hooks",
        f"- Files patched: {WORKER}",
        "- Verification: passed: 1 import ok",
        "- Rehearsal: passed; model: LlamaForCausalLM (default); topology: world size 1",
        "- Requirement `torch<=2.10.0,>=2.9.0` is `torch>=2.9.0` here: vLLM 0.33.0 requires torch==2.14.0",
        "- Requirement `transformers<=4.57.6,>=4.56.1` is `transformers>=4.56.1` here: vLLM 0.33.0 requires "
        "transformers<5.21.0,>=5.16.1",
        "- Requirement `vllm<=0.16.0,>=0.12.0; extra == \"datagen\"` is `vllm==0.33.*; extra == \"datagen\"` here: "
        "vLLM 0.33.0 requires vllm",
    ]


def test_provenance_is_readable_back() -> None:
    built = build.build(original_files(), PATCHED, facts())
    data = members(built.data)[f"{NEW}/vsp/patch.json"]
    back = Provenance.from_bytes(data)
    assert back == built.provenance
    assert back.files == {WORKER: {"original": record_hash(original_files()[WORKER]),
                                   "patched": record_hash(PATCHED[WORKER])}}
    assert json.loads(data)["requirements"][0]["why"] == "vLLM 0.33.0 requires torch==2.14.0"
    with pytest.raises(ValueError, match="format 2, this tool reads 1"):
        Provenance.from_bytes(json.dumps({**json.loads(data), "format": 2}).encode())
    with pytest.raises(ValueError, match="not JSON"):
        Provenance.from_bytes(b"{")


def test_the_same_inputs_give_the_same_bytes() -> None:
    one = build.build(original_files(), PATCHED, facts())
    two = build.build(dict(reversed(list(original_files().items()))), dict(PATCHED), facts())
    assert one.data == two.data and one.sha256 == two.sha256
    other = build.build(original_files(), PATCHED, facts(verification="passed: 2 imports ok"))
    assert other.data != one.data


def test_bad_inputs_are_refused() -> None:
    with pytest.raises(UsageError, match=r"^speculators/other.py is not a file of the original wheel's package"):
        build.build(original_files(), {"speculators/other.py": b"x"}, facts())
    with pytest.raises(UsageError, match=rf"^{WORKER} is listed as patched but holds the original bytes$"):
        build.build(original_files(), {WORKER: original_files()[WORKER]}, facts())
    tampered = {**original_files(), GENERATOR: b"edited\n"}
    with pytest.raises(UsageError, match=rf"^the original wheel's files do not match its own RECORD \({GENERATOR}\)"):
        build.build(tampered, PATCHED, facts())
    no_record = {k: v for k, v in original_files().items() if not k.endswith("/RECORD")}
    with pytest.raises(UsageError, match=r"^the original wheel has 0 .dist-info folders with a RECORD \(none\)"):
        build.build(no_record, PATCHED, facts())


def test_write_atomic_leaves_no_temporary_file(tmp_path: Path) -> None:
    path = archive.write_atomic(tmp_path, "w.whl", b"data")
    assert path.read_bytes() == b"data" and sorted(p.name for p in tmp_path.iterdir()) == ["w.whl"]
    assert path.stat().st_mode & 0o777 == 0o644
    with pytest.raises(FileNotFoundError):
        archive.write_atomic(tmp_path / "gone", "w.whl", b"data")

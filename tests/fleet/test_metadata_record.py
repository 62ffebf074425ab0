"""METADATA edited line by line; RECORD read, written and checked; the matrix table held to
docs/compatibility.json (the data docs/compatibility.md is made from)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vllm_shim_patch.errors import UsageError
from vllm_shim_patch.fleet import metadata, record, rehearsed
from vllm_shim_patch.fsutil import record_hash

REPO = Path(__file__).resolve().parents[2]


def test_continuation_lines_and_a_missing_body() -> None:
    text = "Metadata-Version: 2.1\nName: p\nVersion: 1.0\nLicense: line one\n        line two\nRequires-Dist: a\n"
    parsed = metadata.parse(text)
    assert parsed.value("License") == "line one\n        line two"
    assert parsed.body is None
    out = metadata.rewrite(text, "1.0+vsp.vllm0.16", [["a", "vllm==0.16.*"]], metadata.note(["patched"]))
    assert out == ("Metadata-Version: 2.1\nName: p\nVersion: 1.0+vsp.vllm0.16\nLicense: line one\n        line two\n"
                   "Requires-Dist: a\nRequires-Dist: vllm==0.16.*\n\npatched\n\n---\n")
    none = metadata.rewrite("Name: p\nVersion: 1\n\nbody\n", "1+vsp.vllm0.16", [["vllm==0.16.*"]], metadata.note(["n"]))
    assert none == "Name: p\nVersion: 1+vsp.vllm0.16\nRequires-Dist: vllm==0.16.*\n\nn\n\n---\n\nbody\n"
    with pytest.raises(UsageError, match="a header line without a colon: 'oops'"):
        metadata.parse("Name: p\noops\n")


def test_record_round_trip_and_check(tmp_path: Path) -> None:
    data = record.write([("p/a,b.py", b"x"), ("p/c.py", b"yy")], "p-1.dist-info/RECORD")
    assert data.decode() == (f'"p/a,b.py",{record_hash(b"x")},1\np/c.py,{record_hash(b"yy")},2\n'
                             "p-1.dist-info/RECORD,,\n")
    rows = record.read(data)
    assert [r.path for r in rows] == ["p/a,b.py", "p/c.py", "p-1.dist-info/RECORD"]
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "a,b.py").write_bytes(b"x")
    (tmp_path / "p" / "c.py").write_bytes(b"changed")
    assert record.mismatches(tmp_path, rows) == ["p/c.py"]
    assert record.mismatches(tmp_path, [*rows, record.Row("../outside", "sha256=x", "1")]) == ["p/c.py"]
    with pytest.raises(ValueError, match="a RECORD row of 2 fields"):
        record.read(b"a,b\n")


def test_the_rehearsed_table_is_the_documents() -> None:
    """The wheel's table is the matrix's data (docs/compatibility.json, which the page is made
    from): a release x speculators pair counts where apply and the rehearsal both exited 0."""
    data = json.loads((REPO / "docs" / "compatibility.json").read_text())
    releases = list(dict.fromkeys(c["vllm"] for c in data["cells"]))
    rows = [(v, tuple(c["speculators"] for c in data["cells"]
                      if c["vllm"] == v and c["apply"]["rc"] == 0 and (c.get("rehearse") or {}).get("rc") == 0))
            for v in releases]
    assert tuple(rows) == rehearsed.REHEARSED
    assert rehearsed.releases("0.3.0")[:2] == ["0.12.0", "0.13.0"]
    assert rehearsed.record("0.3.0", "0.16.0").endswith("records speculators 0.3.0 on vLLM 0.16.0: apply and "
                                                        "rehearsal (the parity workload) passed, rollback RECORD-exact")
    assert rehearsed.record("0.3.0", "0.11.0") == ""

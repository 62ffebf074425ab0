"""Existence answers kept in the signature cache: a second run answers the same without parsing,
and a change to anything an answer was read from (a module, a folder's listing) is seen."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import pytest
import realdata
from conftest import write_tree
from test_members import TREE

from vllm_shim_patch.signatures.static import members as members_mod
from vllm_shim_patch.signatures.static import search as search_mod
from vllm_shim_patch.analysis.audit import Checker, _check_file
from vllm_shim_patch.analysis.calls import scan_uses
from vllm_shim_patch.signatures.static.members import Members
from vllm_shim_patch.signatures.static import StaticSignatures

QUESTIONS = [
    ("vllm.__version__", False, False), ("vllm.utils", False, False),
    ("vllm.request.RequestStatus.FINISHED_ABORTED", False, False),
    ("vllm.request.RequestStatus.FINISHED", False, False), ("vllm.request.RequestStatus.name", True, False),
    ("vllm.request.Executor.cfg", True, False), ("vllm.request.Executor.cfg", False, False),
    ("vllm.request.Executor.sample_tokens", True, False),
    ("vllm.request.Model.to", True, False), ("vllm.request.Dynamic.anything", True, False),
    ("vllm.request.missing", False, False), ("vllm.nomodule.name", False, False), ("vllm._C", False, False),
    ("vllm.pb.Request", False, False), ("vllm.request.model.named_modules", True, False),
    ("vllm.lazy.thing", False, False),
]
# Answers that needed a byte search of every file of the tree: never stored.
TREE_WIDE = [("vllm.request.make.nothing", True, False), ("vllm.request.make.WAITING", True, False),
             ("vllm.request.Executor.sample_tokens", True, True)]


def _new_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a new process starts from: no answers of an earlier run in memory."""
    monkeypatch.setattr(search_mod, "_COMPILED", {})
    monkeypatch.setattr(search_mod, "_DEFINED", {})


def _ask(root: Path, cache: Path, questions: list[tuple[str, bool, bool]]) -> tuple[list[object], list[str]]:
    source = StaticSignatures(root, cache_dir=cache)
    members = Members(source.names)
    answers = [members.answer(*q) for q in questions] + [members.module_answer(m) for m in ("vllm._C", "vllm._E")]
    members.save()
    return answers, source.parsed_modules


def test_a_second_run_answers_the_same_reading_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = write_tree(tmp_path / "src", TREE)
    cache = tmp_path / "cache"
    fresh = [Members(StaticSignatures(root).names).answer(*q) for q in QUESTIONS]
    _new_run(monkeypatch)
    first, parsed = _ask(root, cache, QUESTIONS)
    assert parsed and first[: len(QUESTIONS)] == fresh
    assert first[len(QUESTIONS):] == [(True, ""), (False, "no module vllm._E")]
    _new_run(monkeypatch)
    assert _ask(root, cache, QUESTIONS) == (first, [])


def test_an_answer_from_a_search_of_the_whole_tree_is_not_kept(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    root = write_tree(tmp_path / "src", TREE)
    cache = tmp_path / "cache"
    first, _ = _ask(root, cache, TREE_WIDE)
    assert first[:2] == [
        (False, "instance of vllm.request.Executor has no attribute 'nothing' (nor does any class of this vLLM)"),
        (None, "vllm.request.Executor has no attribute 'WAITING', but the object is only annotated as "
               "vllm.request.Executor: a subclass may define it (vllm.request does)"),
    ]
    # A file no answer read now defines the name: the cache stays valid, the answer must not.
    private = root / "vllm" / "_private.py"
    private.write_bytes(private.read_bytes() + b"nothing = 1\n")
    _new_run(monkeypatch)
    second, parsed = _ask(root, cache, TREE_WIDE)
    assert parsed  # the answers were computed again
    assert second[2] == first[2] == (False, "instance of vllm.request.Executor has no attribute 'sample_tokens' "
                                            "(nor does any class of this vLLM)")
    assert second[0] == (None, "vllm.request.Executor has no attribute 'nothing', but the object is only "
                               "annotated as vllm.request.Executor: a subclass may define it (vllm._private does)")


def test_an_edited_module_is_read_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = write_tree(tmp_path / "src", TREE)
    cache = tmp_path / "cache"
    question = [("vllm.request.RequestStatus.FINISHED", False, False)]
    assert _ask(root, cache, question)[0][0] == (False, "vllm.request.RequestStatus has no attribute 'FINISHED'")
    path = root / "vllm" / "request.py"
    path.write_bytes(path.read_bytes().replace(b"    WAITING = enum.auto()\n",
                                               b"    WAITING = enum.auto()\n    FINISHED = enum.auto()\n"))
    _new_run(monkeypatch)
    answers, parsed = _ask(root, cache, question)
    assert answers[0] == (True, "") and "vllm.request" in parsed


def test_a_new_compiled_module_is_seen_by_its_folder_listing(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    root = write_tree(tmp_path / "src", TREE)
    cache = tmp_path / "cache"
    assert _ask(root, cache, [])[0] == [(True, ""), (False, "no module vllm._E")]  # from RECORD: no .so here
    folder = root / "vllm"
    before = folder.stat().st_mtime_ns
    (folder / "_E.abi3.so").write_bytes(b"")
    os.utime(folder, ns=(before, before + 1_000_000_000))  # a coarse clock must not hide the new entry
    _new_run(monkeypatch)
    # The folder now holds a compiled module: the walk finds it (and no longer trusts RECORD's _C).
    assert _ask(root, cache, [])[0] == [(False, "no module vllm._C"), (True, "")]


def _kept(tmp_path: Path) -> tuple[Path, Path, list[tuple[str, bool, bool]], StaticSignatures, dict]:
    """One question asked and kept: the source tree, the cache, the question, a new reader, its table."""
    root = write_tree(tmp_path / "src", TREE)
    cache = tmp_path / "cache"
    question = [("vllm.request.missing", False, False)]
    _ask(root, cache, question)
    source = StaticSignatures(root, cache_dir=cache)
    table = source.answers("members", members_mod._version())
    assert table is not None
    return root, cache, question, source, table


def test_answers_kept_by_another_version_of_the_checks_are_dropped(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    root, cache, question, source, table = _kept(tmp_path)
    assert table["exists:00:vllm.request.missing"] == [False, "vllm.request has no name 'missing'"]
    table["exists:00:vllm.request.missing"] = [True, ""]  # what another checker might have said
    assert Members(source.names).answer("vllm.request.missing") == (True, "")  # the table is trusted...
    assert source.answers("members", "another") == {"": "another"}  # ...only under its own version
    monkeypatch.setattr(members_mod, "_VERSION", ["another-cpython0.0.0"])
    monkeypatch.setattr(search_mod, "_COMPILED", {})
    assert _ask(root, cache, question)[0][0] == (False, "vllm.request has no name 'missing'")


def test_a_damaged_entry_is_read_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, _, _, source, table = _kept(tmp_path)
    table["exists:00:vllm.request.missing"] = ["no", 3]
    assert Members(source.names).answer("vllm.request.missing") == (False, "vllm.request has no name 'missing'")


@pytest.mark.slow
@pytest.mark.parametrize(("wheel", "vllm"), [(realdata.OLD_SPECULATORS, realdata.REFERENCE_VLLM),
                                             (realdata.NEW_SPECULATORS, "0.11.0")])
def test_real_speculators_uses_answer_the_same_from_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              wheel: str, vllm: str) -> None:
    with zipfile.ZipFile(realdata.speculators_wheel(wheel)) as zf:
        files = {n: zf.read(n) for n in zf.namelist() if n.startswith("speculators/") and n.endswith(".py")}
    uses = {p: scan_uses(d, p) for p, d in files.items()}
    root = realdata.vllm_source(vllm)
    cache = tmp_path / "cache"

    def run(cache_dir: Path | None) -> tuple[list[tuple[object, ...]], list[str]]:
        _new_run(monkeypatch)
        source = StaticSignatures(root, cache_dir=cache_dir)
        sigs = source.get_many(sorted({u.callee for g in uses.values() for u in g if u.is_call}))
        members = Members(source.names)
        checker = Checker(sigs, "", members, source)
        got = [(b.call.path, b.call.line, b.call.callee, str(b.status), b.reason)
               for p in sorted(uses) for b in _check_file(uses[p], checker)]
        members.save()
        return got, source.parsed_modules

    fresh, _ = run(None)
    assert any(status == "mismatch" for *_, status, _ in fresh)
    cold, parsed = run(cache)
    warm, reparsed = run(cache)
    assert cold == fresh and warm == fresh
    assert parsed and reparsed == []


@pytest.mark.parametrize("how", ["own", "the-readers"])  # the audit asks the reader's own (`source.members`)
def test_the_reader_and_its_modules_are_freed_without_the_cycle_collector(tmp_path: Path, how: str) -> None:
    import gc
    import weakref

    root = write_tree(tmp_path / "src", TREE)
    was = gc.isenabled()
    gc.disable()
    try:
        source = StaticSignatures(root, cache_dir=tmp_path / "cache")
        members = Members(source.names) if how == "own" else source.members
        assert members.answer("vllm.request.missing") == (False, "vllm.request has no name 'missing'")
        members.save()
        refs = [weakref.ref(source), weakref.ref(source.names)]
        del source, members
        # A cycle would keep every parsed tree until a collection (~0.1 s at exit after a cold run).
        assert [r() for r in refs] == [None, None]
    finally:
        if was:
            gc.enable()


def test_bytecode_written_by_an_import_keeps_the_answers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = write_tree(tmp_path / "src", {**TREE, "vllm/_C.abi3.so": b""})
    cache = tmp_path / "cache"
    (root / "vllm" / "__pycache__").mkdir()
    first, _ = _ask(root, cache, [("vllm.request.missing", False, False)])
    assert first == [(False, "vllm.request has no name 'missing'"), (True, ""), (False, "no module vllm._E")]
    pycache = root / "vllm" / "__pycache__"
    before = pycache.stat().st_mtime_ns
    (pycache / "request.cpython-311.pyc").write_bytes(b"")
    os.utime(pycache, ns=(before, before + 1_000_000_000))  # seen even by a coarse clock
    _new_run(monkeypatch)
    assert _ask(root, cache, [("vllm.request.missing", False, False)]) == (first, [])

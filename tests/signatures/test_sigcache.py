"""The on-disk signature cache: a second reader over the same source parses nothing, and any
change to what the answers were read from (or a damaged cache file) makes it read again."""

from __future__ import annotations

import json
import os
import shutil
import zipfile
from pathlib import Path

import pytest
from sigcases import RESOLVED, TREE, UNKNOWN, render

from vllm_shim_patch.signatures import StaticSignatures
from vllm_shim_patch.signatures.static import cache as cachemod

NAMES = ["vllm.dc.Point", "vllm.pyd.SchedulerLike", "vllm.lazy.Job", "vllm.reexport.Thing",
         "vllm.funcs.wrapped", "vllm.nowhere.f"]


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "site"
    shutil.copytree(TREE, root)
    (root / "vllm-9.9.9.dist-info").mkdir()
    (root / "vllm-9.9.9.dist-info" / "RECORD").write_text("vllm/__init__.py,,\n")
    return root


def _answers(src: StaticSignatures, names: list[str]) -> dict[str, str | None]:
    return {n: render(s) if s is not None else f"? {src.unknown_reason(n)}"
            for n, s in src.get_many(names).items()}


def _cache_file(cache: Path) -> Path:
    files = list((cache / "signatures").iterdir())
    assert len(files) == 1, files
    return files[0]


def test_second_reader_parses_nothing_and_answers_the_same(tree: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first = StaticSignatures(tree, cache_dir=cache)
    names = [q for q, _ in RESOLVED] + [q for q, _ in UNKNOWN]
    expected = _answers(first, names)
    assert first.parsed_modules  # the first run read the source
    second = StaticSignatures(tree, cache_dir=cache)
    assert _answers(second, names) == expected
    assert second.parsed_modules == []
    assert [s.origin for s in second.get_many(n for n, _ in RESOLVED).values()] == [
        s.origin for s in first.get_many(n for n, _ in RESOLVED).values()
    ]
    # defines() answers are kept too.
    assert first.defines("vllm.classes.Methods.method") is True
    third = StaticSignatures(tree, cache_dir=cache)
    assert third.defines("vllm.classes.Methods.method") is True
    assert third.parsed_modules == []
    # Nothing beside the one JSON file (no temp files), and nothing in the source tree.
    assert [p.name for p in (cache / "signatures").iterdir()] == [_cache_file(cache).name]
    assert not list(tree.rglob("*.json"))


def test_edited_source_is_read_again(tree: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    assert _answers(StaticSignatures(tree, cache_dir=cache), ["vllm.funcs.plain"]) == {
        "vllm.funcs.plain": "a, b=, *, c, d="}
    path = tree / "vllm" / "funcs.py"
    path.write_text(path.read_text().replace("def plain(a, b=1, *, c, d=2)", "def plain(a, *, c)"))
    again = StaticSignatures(tree, cache_dir=cache)
    assert _answers(again, ["vllm.funcs.plain"]) == {"vllm.funcs.plain": "a, *, c"}
    assert again.parsed_modules


def test_same_size_edit_is_seen_by_its_mtime(tree: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    StaticSignatures(tree, cache_dir=cache).get("vllm.funcs.plain")
    path = tree / "vllm" / "funcs.py"
    text = path.read_text()
    path.write_text(text.replace("def plain(a, b=1,", "def plain(x, b=1,"))
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert render(StaticSignatures(tree, cache_dir=cache).get("vllm.funcs.plain")) == "x, b=, *, c, d="


def test_new_file_that_shadows_is_seen(tree: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    # The first answer is "no such module"; the paths probed for it are part of its validity.
    StaticSignatures(tree, cache_dir=cache).get_many(["vllm.nowhere.f"])
    (tree / "vllm" / "nowhere.py").write_text("def f(q):\n    pass\n")
    assert render(StaticSignatures(tree, cache_dir=cache).get("vllm.nowhere.f")) == "q"


def test_reinstalled_vllm_is_read_again(tree: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    StaticSignatures(tree, cache_dir=cache).get("vllm.funcs.plain")
    shutil.rmtree(tree / "vllm-9.9.9.dist-info")
    (tree / "vllm-10.0.0.dist-info").mkdir()
    (tree / "vllm-10.0.0.dist-info" / "RECORD").write_text("")
    again = StaticSignatures(tree, cache_dir=cache)
    again.get("vllm.funcs.plain")
    assert again.parsed_modules == ["vllm.funcs"]


@pytest.mark.parametrize(
    "damage",
    [b"", b"{not json", b"[]", b'{"format": 1}', b"\x00\xff" * 10],
    ids=["empty", "truncated", "list", "no-fields", "binary"],
)
def test_damaged_cache_file_is_ignored_and_rebuilt(tree: Path, tmp_path: Path, damage: bytes) -> None:
    cache = tmp_path / "cache"
    first = _answers(StaticSignatures(tree, cache_dir=cache), NAMES)
    _cache_file(cache).write_bytes(damage)
    again = StaticSignatures(tree, cache_dir=cache)
    assert _answers(again, NAMES) == first
    assert again.parsed_modules
    assert json.loads(_cache_file(cache).read_bytes())["format"] == cachemod.FORMAT  # rebuilt
    third = StaticSignatures(tree, cache_dir=cache)
    assert _answers(third, NAMES) == first and third.parsed_modules == []


def test_damaged_entries_are_read_again(tree: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first = _answers(StaticSignatures(tree, cache_dir=cache), NAMES)
    path = _cache_file(cache)
    data = json.loads(path.read_bytes())
    table = data["tables"]["signatures"]
    table["vllm.dc.Point"] = {"params": [["x", "no_such_kind", True, None]], "origin": "x"}
    table["vllm.pyd.SchedulerLike"] = "garbage"
    table["vllm.lazy.Job"] = {"params": [["x", "keyword_only", "yes", None]], "origin": "x"}
    data["tables"]["defines"] = {"vllm.classes.Methods.method": "maybe"}
    path.write_text(json.dumps(data))
    again = StaticSignatures(tree, cache_dir=cache)
    assert _answers(again, NAMES) == first
    assert again.defines("vllm.classes.Methods.method") is True
    assert "vllm.pyd" in again.parsed_modules and "vllm.dc" in again.parsed_modules


def test_other_reader_or_format_is_ignored(tree: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    StaticSignatures(tree, cache_dir=cache).get("vllm.funcs.plain")
    path = _cache_file(cache)
    data = json.loads(path.read_bytes())
    data["tables"]["signatures"]["vllm.funcs.plain"] = {"params": [], "origin": "forged"}
    for key, value in (("reader", "0" * 64), ("format", cachemod.FORMAT + 1), ("root", "/else")):
        path.write_text(json.dumps({**data, key: value}))
        assert render(StaticSignatures(tree, cache_dir=cache).get("vllm.funcs.plain")) == (
            "a, b=, *, c, d="
        ), key
    path.write_text(json.dumps(data))  # the same forged entry under valid keys is believed
    assert StaticSignatures(tree, cache_dir=cache).get("vllm.funcs.plain").origin == "forged"


def test_unwritable_cache_dir_costs_only_speed(tree: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    src = StaticSignatures(tree, cache_dir=blocker / "cache")  # cannot mkdir under a file
    assert render(src.get("vllm.funcs.plain")) == "a, b=, *, c, d="


def test_wheel_is_keyed_by_its_own_stat(tmp_path: Path) -> None:
    wheel = tmp_path / "vllm-9.9.9-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("vllm/__init__.py", "")
        zf.writestr("vllm/funcs.py", "def plain(a, b=1):\n    pass\n")
    cache = tmp_path / "cache"
    assert render(StaticSignatures(wheel, cache_dir=cache).get("vllm.funcs.plain")) == "a, b="
    second = StaticSignatures(wheel, cache_dir=cache)
    assert render(second.get("vllm.funcs.plain")) == "a, b=" and second.parsed_modules == []
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("vllm/__init__.py", "")
        zf.writestr("vllm/funcs.py", "def plain(a, b=1, c=2, d=3):\n    pass\n")
    assert render(StaticSignatures(wheel, cache_dir=cache).get("vllm.funcs.plain")) == "a, b=, c=, d="


def test_default_cache_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("VSP_CACHE_DIR", str(tmp_path / "x"))
    assert cachemod.default_cache_dir() == tmp_path / "x"
    monkeypatch.delenv("VSP_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cachemod.default_cache_dir() == tmp_path / "xdg" / "vllm-shim-patch"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    # HOME=/nonexistent: no cache, so nothing creates the home folder (issue 20).
    assert cachemod.default_cache_dir() is None
    (tmp_path / "home").mkdir()
    assert cachemod.default_cache_dir() == tmp_path / "home" / ".cache" / "vllm-shim-patch"


# -- the cache is private: another user's entry, or one others can write, is never read ---------


def _made_by_another_user(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`path` owned by someone else: chown where we are root, else the tool told it runs as
    another uid (a stand-in for a second account, which a test cannot make)."""
    if os.geteuid() == 0:
        os.chown(path, 4242, 4242)
    else:
        real = os.geteuid()
        monkeypatch.setattr(os, "geteuid", lambda: real + 1)


def _forge(cache: Path) -> None:
    path = _cache_file(cache)
    data = json.loads(path.read_bytes())
    data["tables"]["signatures"]["vllm.funcs.plain"] = {"params": [], "origin": "forged"}
    path.write_text(json.dumps(data))


def test_the_cache_is_made_private_whatever_the_umask(tree: Path, tmp_path: Path) -> None:
    cache = tmp_path / "home" / "cache"
    old = os.umask(0)
    try:
        StaticSignatures(tree, cache_dir=cache).get("vllm.funcs.plain")
    finally:
        os.umask(old)
    modes = {p.relative_to(tmp_path).as_posix(): oct(p.stat().st_mode & 0o777)
             for p in (tmp_path / "home", cache, cache / "signatures", _cache_file(cache))}
    assert modes == {"home": "0o700", "home/cache": "0o700", "home/cache/signatures": "0o700",
                     f"home/cache/signatures/{_cache_file(cache).name}": "0o600"}


@pytest.mark.parametrize("how", ["group-writable entry", "world-writable folder", "another user's entry"])
def test_an_entry_others_could_write_is_ignored_and_said(
        tree: Path, tmp_path: Path, how: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    cache = tmp_path / "cache"
    StaticSignatures(tree, cache_dir=cache).get("vllm.funcs.plain")
    _forge(cache)
    entry = _cache_file(cache)
    capsys.readouterr()
    if how == "group-writable entry":
        entry.chmod(0o620)
        said = f"entry {entry} is ignored: it is writable by other users (mode 0620) (remove it: rm {entry})"
    elif how == "world-writable folder":
        (cache / "signatures").chmod(0o777)
        said = (f"at {cache} is ignored: {cache / 'signatures'} is writable by other users (mode 0777) "
                f"(remove it: rm -r {cache})")
    else:
        _made_by_another_user(entry, monkeypatch)
        said = (f"entry {entry} is ignored: it is owned by uid {entry.stat().st_uid} (you run as uid "
                f"{os.geteuid()}) (remove it: rm {entry})")
    again = StaticSignatures(tree, cache_dir=cache)
    assert render(again.get("vllm.funcs.plain")) == "a, b=, *, c, d="  # read from the source
    assert again.parsed_modules
    err = capsys.readouterr().err.splitlines()
    assert err == [f"vllm-shim-patch: the signature cache {said}"]


def test_verification_reads_the_source_not_the_cache(tree: Path, tmp_path: Path) -> None:
    """A forged answer of this user's own cache may steer a guard; the binding that verifies the
    write re-reads the source (`fresh`), so it cannot pass what it steered."""
    cache = tmp_path / "cache"
    StaticSignatures(tree, cache_dir=cache).get("vllm.funcs.plain")
    _forge(cache)
    src = StaticSignatures(tree, cache_dir=cache)
    assert src.get_many(["vllm.funcs.plain"])["vllm.funcs.plain"].origin == "forged"  # the guard's read
    fresh = src.get_many(["vllm.funcs.plain"], fresh=True)["vllm.funcs.plain"]
    assert render(fresh) == "a, b=, *, c, d=" and fresh.origin != "forged"
    assert StaticSignatures(tree, cache_dir=cache).get("vllm.funcs.plain").origin != "forged"  # stored anew

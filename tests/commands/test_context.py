"""The context of one run: small lazy services (nothing is loaded or asked before a command reads
it) and the pre-flight refusals as plain functions, with the messages they always had."""

from __future__ import annotations

from pathlib import Path

import pytest

from vllm_shim_patch.commands import preflight
from vllm_shim_patch.commands.context import Context
from vllm_shim_patch.errors import TargetError, UsageError
from vllm_shim_patch.rules.loader import load_pack
from vllm_shim_patch.settings import Settings
from vllm_shim_patch.target import Target


def test_a_context_loads_nothing_until_asked() -> None:
    # An interpreter that does not exist: constructing the context must not probe it.
    ctx = Context(Settings(python="/nonexistent/python", skip=("zzz",)))
    assert ctx.rules.loaded is None and not ctx.vllm.opened
    public = sorted(n for n in vars(Context) if not n.startswith("_"))
    assert public == ["load", "plan", "plan_cache", "start_probe", "target", "who"]
    assert sorted(vars(ctx)) == ["files", "log", "probe", "review", "rules", "settings", "vllm"]
    with pytest.raises(UsageError, match=r"^--skip 'zzz': no loaded rule has this id; the rules are "):
        ctx.rules.pack  # noqa: B018


def test_the_rule_selection() -> None:
    full = load_pack()
    first, second = full.rules[0].id, full.rules[1].id
    rules = Context(Settings(skip=(first,))).rules
    assert [r.id for r in rules.pack.rules] == [r.id for r in full.rules if r.id != first and r.option is None]
    assert rules.skipped == (first,)
    assert rules.not_opted == tuple(r.id for r in full.rules if r.option is not None)
    assert rules.loaded is rules.pack
    assert [r.id for r in Context(Settings(only=(second,))).rules.pack.rules] == [second]


def test_check_package_names_the_packages_the_rules_are_for() -> None:
    pack = load_pack()
    preflight.check_package("speculators", pack)
    with pytest.raises(UsageError) as raised:
        preflight.check_package("pip", pack)
    assert str(raised.value) == ("--package pip: the rules are for speculators only (a rule file's 'package:' "
                                 "names the package it is for); nothing was recorded")


def _target(tmp_path: Path, **more: object) -> Target:
    fields = {"python": "/usr/bin/python3", "python_version": "3.11", "package": "speculators", "version": "0.3.0", "location": tmp_path,
              "record": (), "editable": None, "vllm_version": None, "vllm_location": None}
    fields.update(more)
    return Target(**fields)


def test_refusals_name_the_install(tmp_path: Path) -> None:
    preflight.refuse_editable(_target(tmp_path))
    with pytest.raises(TargetError) as raised:
        preflight.refuse_editable(_target(tmp_path, editable="/src/speculators"))
    assert str(raised.value) == ("speculators is installed in editable mode from /src/speculators: patch that "
                                 "source checkout with git instead")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("x = 1\n")
    (tmp_path / "link.py").symlink_to(tmp_path / "pkg" / "a.py")
    target = _target(tmp_path)
    preflight.check_writable(target, ["pkg/a.py"])
    with pytest.raises(TargetError, match=r"link.py is a symbolic link \(a linked install\?\): reinstall speculators"):
        preflight.check_writable(target, ["link.py"])

"""Typed options: one frozen object per command, an unknown key is an error, options given on
both sides of the command name merge, and `rules docs` speaks JSON."""

from __future__ import annotations

import dataclasses
import inspect
import json
import subprocess
import sys
from pathlib import Path

import pytest

from vllm_shim_patch.commands import COMMANDS, DEFAULT, GROUPS, Command, command
from vllm_shim_patch.settings import ApplyOptions, CliOptions, CommandOptions, Settings, spelling

# Every command's options, read from the one table the CLI is built from.
OPTIONS = sorted({entry.options for entry in COMMANDS}, key=lambda k: k.__name__)


@pytest.mark.parametrize("kind", [Settings, *OPTIONS], ids=lambda k: k.__name__)
def test_an_unknown_key_is_an_error(kind: type) -> None:
    with pytest.raises(TypeError, match=rf"^{kind.__name__} has no option 'pythn' \(known: "):
        kind.from_options({"pythn": "x"})


@pytest.mark.parametrize("kind", [Settings, CliOptions, *OPTIONS], ids=lambda k: k.__name__)
def test_options_are_frozen(kind: type) -> None:
    value = kind()
    with pytest.raises(dataclasses.FrozenInstanceError):
        value.x = 1


def test_given_options_go_on_top_of_the_base_and_both_rules_lists_count() -> None:
    base = Settings.from_options({"rules": ("a.yaml",), "verbose": 2, "package": "p"})
    merged = Settings.from_options({"rules": ("b.yaml", "a.yaml"), "verbose": 0, "package": None,
                                    "as_json": True}, base)
    assert merged == Settings(package="p", rules=("a.yaml", "b.yaml"), verbose=2, as_json=True)
    apply = ApplyOptions.from_options({"wait": True, "dry_run": None})
    assert ApplyOptions.from_options({"check": True}, apply) == ApplyOptions(wait=True, check=True)


@pytest.mark.parametrize("entry", COMMANDS, ids=lambda e: e.name.replace(" ", "-"))
def test_every_command_has_one_shape(entry: Command) -> None:
    command = entry.load()
    assert callable(command)
    signature = inspect.signature(command)
    assert list(signature.parameters) == ["ctx", "opts"]
    assert signature.return_annotation == "Outcome"
    assert signature.parameters["opts"].annotation == entry.options.__name__
    assert issubclass(entry.options, CommandOptions)


MODES = [(entry, option, function) for entry in COMMANDS for option, function in entry.modes]


def test_apply_has_its_modes() -> None:
    # The table, not apply, sends --dry-run to the diff, --check to the check, --wheel-out around apply.
    assert [(e.name, o, f) for e, o, f in MODES] == [
        ("apply", "dry_run", "diff:dry_run"), ("apply", "check", "check:check"),
        ("apply", "wheel_out", "apply:wheel_out")]
    apply = command("apply")
    assert apply.chosen(ApplyOptions()) == ("apply", "apply")
    assert apply.chosen(ApplyOptions(dry_run=True, check=True, wheel_out="w")) == ("diff", "dry_run")
    assert apply.chosen(ApplyOptions(check=True, wheel_out="w")) == ("check", "check")
    assert apply.chosen(ApplyOptions(wheel_out="")) == ("apply", "wheel_out")


@pytest.mark.parametrize(("given", "named"), [({"dry_run": True}, "dry_run"), ({"check": True}, "check"),
                                             ({"wheel_out": ""}, "wheel_out")])
def test_apply_called_with_a_mode_refuses_before_it_writes(given: dict, named: str, tmp_path: Path) -> None:
    # From Python, apply(ctx, ApplyOptions(dry_run=True)) must not write what was only to be seen.
    from vllm_shim_patch.commands.apply import apply
    from vllm_shim_patch.commands.context import Context
    from vllm_shim_patch.errors import UsageError

    with pytest.raises(UsageError) as e:
        apply(Context(Settings(python="/nonexistent/python")), ApplyOptions(**given))
    assert str(e.value) == (f"apply() writes the install and takes no {named}: run "
                            f"vllm_shim_patch.commands.command('apply').load(opts)(ctx, opts), which picks the "
                            f"function for {named}")


@pytest.mark.parametrize(("entry", "option", "function"), MODES, ids=lambda x: getattr(x, "name", str(x)))
def test_every_mode_has_its_commands_shape(entry: Command, option: str, function: str) -> None:
    assert option in {f.name for f in dataclasses.fields(entry.options)}
    mode = entry.load(entry.options(**{option: True}))
    signature = inspect.signature(mode)
    assert (mode.__module__, mode.__name__) == (f"vllm_shim_patch.commands.{function.split(':')[0]}",
                                                function.split(":")[1])
    assert list(signature.parameters) == ["ctx", "opts"]
    assert signature.return_annotation == "Outcome"
    assert signature.parameters["opts"].annotation == entry.options.__name__


def _click_commands() -> dict[str, set[str]]:
    """Every command the CLI offers, by its words, with the names of its parameters."""
    import click

    from vllm_shim_patch.cli import main

    found: dict[str, set[str]] = {}

    def walk(group: click.Group, prefix: str) -> None:
        for name, cmd in group.commands.items():
            if isinstance(cmd, click.Group):
                walk(cmd, f"{prefix}{name} ")
            else:
                found[prefix + name] = {p.name for p in cmd.params if p.name is not None} - {"help"}

    walk(main, "")
    return found


def test_the_cli_is_the_table() -> None:
    # No command is added to the CLI by hand, none in the table is left out of it, and each takes
    # exactly the options its entry says: the common settings, the ones it names, its own.
    settings = {f.name: spelling(f) for f in dataclasses.fields(Settings)}
    common = {name for name, opt in settings.items() if opt.common}
    expected = {entry.name: common | set(entry.settings) | {f.name for f in dataclasses.fields(entry.options)}
                for entry in COMMANDS}
    assert _click_commands() == expected
    assert {entry.name.split()[0] for entry in COMMANDS if " " in entry.name} == set(GROUPS)


def test_every_option_is_spelled_and_every_named_setting_exists() -> None:
    settings = {f.name: spelling(f) for f in dataclasses.fields(Settings)}
    for entry in COMMANDS:
        assert [n for n in entry.settings if n not in settings or settings[n].common] == [], entry.name
        for f in dataclasses.fields(entry.options):
            spelling(f)  # raises without one
    # A setting no command takes could never be given.
    named = {n for entry in COMMANDS for n in entry.settings}
    assert {n for n, opt in settings.items() if not opt.common} == named
    assert len({entry.name for entry in COMMANDS}) == len(COMMANDS)
    assert any(entry.name == DEFAULT and entry.options is ApplyOptions for entry in COMMANDS)


def test_an_option_declared_without_a_spelling_is_refused() -> None:
    @dataclasses.dataclass(frozen=True)
    class Bare(CommandOptions):
        plain: bool = False

    with pytest.raises(TypeError, match=r"^option 'plain' has no command-line spelling"):
        spelling(dataclasses.fields(Bare)[0])


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    # No time limit (a unit test's outcome never depends on the machine's load); no terminal to wait on.
    return subprocess.run([sys.executable, "-m", "vllm_shim_patch", *args], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL)


def test_rules_docs_honours_json() -> None:
    from vllm_shim_patch.report.rules import rows
    from vllm_shim_patch.rules.loader import load_pack

    r = _cli("rules", "docs", "--json")
    assert (r.returncode, r.stderr) == (0, "")
    assert json.loads(r.stdout) == rows(load_pack().rules)
    assert [row["id"] for row in json.loads(r.stdout)] == [rule.id for rule in load_pack().rules]


def test_json_before_the_command_name_reaches_the_error_boundary(tmp_path: Path) -> None:
    r = _cli("--json", "rules", "check", str(tmp_path / "nope.yaml"))
    error = f"{tmp_path}/nope.yaml: no such rule file or folder"
    assert (r.returncode, json.loads(r.stdout)) == (2, {"ok": False, "error": error, "kind": "RuleError"})

"""Issue 11: the state dir comes from --state-dir, $XDG_STATE_HOME or HOME; relative ones work,
unusable ones are one line and exit 2 before anything is written, and none may sit in site-packages."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import Sandbox

from vllm_shim_patch.errors import StateDirError
from vllm_shim_patch.overlay.layout import check_state_root, state_root
from vllm_shim_patch.settings import Settings


def test_relative_state_dir_and_xdg_are_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert Settings.from_options({"state_dir": "rel/state"}).state_dir == f"{tmp_path}/rel/state"
    assert state_root("rel/state") == tmp_path / "rel" / "state"
    monkeypatch.setenv("XDG_STATE_HOME", "xdg")
    assert state_root(None) == tmp_path / "xdg" / "vllm-shim-patch"


def test_home_that_is_not_a_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "nowhere"))
    with pytest.raises(StateDirError) as info:
        state_root(None)
    assert str(info.value) == (f"HOME {tmp_path}/nowhere is not a folder: set HOME or XDG_STATE_HOME, "
                               f"or pass --state-dir")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert state_root(None) == tmp_path / ".local" / "state" / "vllm-shim-patch"


@pytest.mark.parametrize(
    ("root", "message"),
    [
        ("/dev/null/vllm-shim-patch", ("state dir /dev/null/vllm-shim-patch cannot be created: /dev/null is not a "
                                      "folder: pass --state-dir with a folder (or fix XDG_STATE_HOME)")),
        ("/dev/null", "state dir /dev/null is not a folder: pass --state-dir with a folder (or fix XDG_STATE_HOME)"),
        ("/usr/lib/python3/dist-packages/x", ("state dir /usr/lib/python3/dist-packages/x is inside dist-packages: "
                                             "the overlay must live outside installed packages; pass --state-dir "
                                             "with a folder elsewhere")),
    ],
)
def test_unusable_state_roots(root: str, message: str) -> None:
    with pytest.raises(StateDirError) as info:
        check_state_root(Path(root), Path("/srv/env/lib/python3.12/site-packages"))
    assert str(info.value) == message


def test_state_root_inside_the_target_location(tmp_path: Path) -> None:
    site = tmp_path / "target"  # e.g. pip install --target: not named site-packages
    (site / "speculators").mkdir(parents=True)
    (tmp_path / "link").symlink_to(site / "speculators")
    for root in (site / "speculators" / "state", tmp_path / "link" / "state", site):
        with pytest.raises(StateDirError) as info:
            check_state_root(root, site)
        assert str(info.value) == (f"state dir {root} is inside the target's {site}: the overlay must live outside "
                                   f"installed packages; pass --state-dir with a folder elsewhere")
    check_state_root(tmp_path / "state", site)


def _cli(sb: Sandbox, *args: str, env: dict[str, str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if k not in ("XDG_STATE_HOME",) and not k.startswith("VSP_TEST_")}
    return subprocess.run([sys.executable, "-m", "vllm_shim_patch", "--python", str(sb.python), *args],
                          capture_output=True, text=True, env={**full, **env}, cwd=cwd, timeout=300, check=False)


@pytest.mark.slow
@pytest.mark.parametrize("command", [["status"], ["--vllm-version", "0.16"], ["rollback"], ["log"],
                                     ["--dry-run", "--vllm-version", "0.16"]], ids=" ".join)
@pytest.mark.parametrize("xdg", ["/dev/null", "file"])
def test_state_dir_that_is_a_file_stops_every_command(sandbox: Sandbox, tmp_path: Path, command: list[str],
                                                      xdg: str) -> None:
    if xdg == "file":
        xdg = str(tmp_path / "a-file")
        Path(xdg).write_text("")
    before = sandbox.snapshot()
    r = _cli(sandbox, "--json", *command, env={"XDG_STATE_HOME": xdg})
    message = (f"state dir {xdg}/vllm-shim-patch cannot be created: {xdg} is not a folder: pass --state-dir "
               f"with a folder (or fix XDG_STATE_HOME)")
    assert (r.returncode, r.stderr) == (2, f"patch-speculators: error: {message}\n")
    assert json.loads(r.stdout) == {"ok": False, "error": message, "kind": "StateDirError"}
    assert sandbox.snapshot() == before


@pytest.mark.slow
def test_state_dir_on_proc_writes_nothing(sandbox: Sandbox) -> None:
    before = sandbox.snapshot()
    r = _cli(sandbox, "--vllm-version", "0.16", env={"XDG_STATE_HOME": "/proc"})
    assert (r.returncode, r.stderr) == (2, ("patch-speculators: error: cannot write the state dir "
                                           "/proc/vllm-shim-patch: No such file or directory; nothing was changed "
                                           "(pass --state-dir with a writable folder)\n"))
    assert sandbox.snapshot() == before
    assert _cli(sandbox, "status", env={"XDG_STATE_HOME": "/proc"}).returncode == 0


@pytest.mark.slow
def test_state_dir_not_writable(sandbox: Sandbox) -> None:
    sandbox.state.mkdir()
    before = sandbox.snapshot()
    subprocess.run(["chattr", "+i", str(sandbox.state)], check=True)
    try:
        r = sandbox.run("--json", "--vllm-version", "0.16")
    finally:
        subprocess.run(["chattr", "-i", str(sandbox.state)], check=True)
    message = (f"cannot write the state dir {sandbox.state}: Operation not permitted; nothing was changed "
               f"(pass --state-dir with a writable folder)")
    assert (r.returncode, r.stderr.splitlines()[-1]) == (2, f"patch-speculators: error: {message}")
    assert json.loads(r.stdout)["error"] == message
    assert sandbox.snapshot() == before
    assert list(sandbox.state.iterdir()) == []


@pytest.mark.slow
def test_home_nowhere_is_one_line(sandbox: Sandbox, tmp_path: Path) -> None:
    r = _cli(sandbox, "--vllm-version", "0.16", env={"HOME": str(tmp_path / "nowhere")})
    assert (r.returncode, r.stderr) == (2, (f"patch-speculators: error: HOME {tmp_path}/nowhere is not a folder: "
                                           f"set HOME or XDG_STATE_HOME, or pass --state-dir\n"))
    assert not (tmp_path / "nowhere").exists()


@pytest.mark.slow
@pytest.mark.parametrize("how", ["option", "xdg"])
def test_relative_state_dir_works(sandbox: Sandbox, tmp_path: Path, how: str) -> None:
    args, env = (["--state-dir", "rel"], {}) if how == "option" else ([], {"XDG_STATE_HOME": "rel"})
    r = _cli(sandbox, *args, "--vllm-version", "0.16", env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    overlays = list((tmp_path / "rel").glob("**/state.json"))
    assert len(overlays) == 1
    status = _cli(sandbox, *args, "status", env=env, cwd=tmp_path)
    assert status.stdout.startswith("patched (not rehearsed: no vLLM in the target): speculators 0.3.0"), status.stderr
    back = _cli(sandbox, *args, "rollback", env=env, cwd=tmp_path)
    assert back.returncode == 0, back.stderr


@pytest.mark.slow
@pytest.mark.parametrize("where", ["package", "site-packages", "tool's site-packages"])
def test_state_dir_in_site_packages_is_refused(sandbox: Sandbox, where: str) -> None:
    import click

    root = {"package": sandbox.site / "speculators" / "state", "site-packages": sandbox.site / "state",
            "tool's site-packages": Path(click.__file__).parent / "vsp-state"}[where]
    before = sandbox.snapshot()
    r = sandbox.run("--state-dir", str(root), "--vllm-version", "0.16")
    inside = "site-packages" if where == "tool's site-packages" else f"the target's {sandbox.site}"
    assert (r.returncode, r.stderr) == (2, (f"patch-speculators: error: state dir {root} is inside {inside}: the "
                                           f"overlay must live outside installed packages; pass --state-dir with a "
                                           f"folder elsewhere\n"))
    assert not root.exists()
    assert sandbox.snapshot() == before

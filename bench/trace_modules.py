"""Trace one run of the CLI in-process and count how it walks the package's modules: each call into
a module from another (a visit) and each return back out, and which lower modules the `commands/`
layer calls itself. Not a speed measurement: the shape of a run (issue 41: "the path of one apply
through the modules with fewer returns").

usage: python bench/trace_modules.py [apply|wheelout|rollback]

On a throwaway venv holding the real speculators 0.3.0 (`--no-deps`, no vLLM), the rules read from
the reference vLLM source (`tests/realdata.py`), `--no-verify`. Another build of the tool: put its
`src` first on PYTHONPATH.
"""

from __future__ import annotations

import collections
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import realdata  # noqa: E402

PKG = "vllm_shim_patch"
LOW = ("overlay", "fsutil")  # the modules the transaction's steps walked


def _sandbox(root: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / "venv")], check=True)
    python = root / "venv/bin/python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
                    str(realdata.speculators_wheel())], check=True, capture_output=True)
    return python


def _short(module: str) -> str:
    return module.removeprefix(PKG + ".")


def main() -> None:
    from click.testing import CliRunner

    from vllm_shim_patch.cli import main as cli

    mode = sys.argv[1] if len(sys.argv) > 1 else "apply"
    root = Path(tempfile.mkdtemp(prefix="vsp-trace-"))
    base = ["--python", str(_sandbox(root)), "--state-dir", str(root / "state"),
            "--vllm-source", str(realdata.vllm_source())]
    args = {"apply": ["apply", "--no-verify"],
            "wheelout": ["apply", "--no-verify", "--wheel", str(realdata.speculators_wheel()), "--no-index",
                         "--wheel-out", str(root / "out")],
            "rollback": ["rollback"]}[mode]
    if mode == "rollback":
        assert CliRunner().invoke(cli, [*base, "apply", "--no-verify"]).exit_code == 0
    visits: collections.Counter[str] = collections.Counter()
    returns: collections.Counter[str] = collections.Counter()
    from_commands: collections.Counter[tuple[str, str]] = collections.Counter()
    walk: list[str] = []
    plans = 0

    def module_of(frame: object) -> str | None:
        name = getattr(frame, "f_globals", {}).get("__name__", "")
        return name if name.startswith(PKG) else None

    def profile(frame, event, arg):  # type: ignore[no-untyped-def]
        nonlocal plans
        if event not in ("call", "return") or (module := module_of(frame)) is None:
            return
        caller = frame.f_back
        while caller is not None and module_of(caller) is None:
            caller = caller.f_back
        outer = module_of(caller) if caller is not None else None
        if event == "return":
            if outer is not None and outer != module:
                returns[module] += 1
            return
        plans += frame.f_code.co_name == "make_plan"
        if outer == module:
            return
        visits[module] += 1
        if outer and _short(outer).startswith("commands") and not _short(module).startswith("commands"):
            from_commands[(_short(outer), _short(module))] += 1
            if _short(module).startswith(LOW) and (not walk or walk[-1] != _short(module)):
                walk.append(_short(module))

    sys.setprofile(profile)
    result = CliRunner().invoke(cli, [*base, *args], prog_name="patch-speculators")
    sys.setprofile(None)
    shutil.rmtree(root, ignore_errors=True)
    print(f"{mode}: exit {result.exit_code}; make_plan entered {plans} times")
    print("visits and returns of overlay/ and fsutil:")
    for module in sorted(visits, key=lambda m: -visits[m]):
        if _short(module).startswith(LOW):
            print(f"  {_short(module):32s} visits {visits[module]:5d} returns {returns[module]:5d}")
    print("calls from commands/ into overlay/ and fsutil (caller -> callee: count):")
    for (outer, module), n in sorted(from_commands.items()):
        if module.startswith(LOW):
            print(f"  {outer:28s} -> {module:28s} {n}")
    print(f"the commands' walk into them ({len(walk)} steps): {' > '.join(walk)}")


if __name__ == "__main__":
    main()

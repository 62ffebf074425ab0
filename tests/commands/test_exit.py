"""The console script leaves without the interpreter's teardown (`cli.script`), and nothing of an
ordinary exit is lost: the output flushed, exit handlers run, the exit code kept, a thread still
running joined."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version

# Run before `script()` in a fresh interpreter: output left in stdout's buffer (a pipe: block
# buffered), an exit handler, and an object whose finalizer only an interpreter's teardown calls.
PRELUDE = """
import atexit, sys
class Finalized:
    def __del__(self):
        print("teardown")
held = Finalized()
print("buffered", end=" ")
atexit.register(print, "exit handler ran")
"""


def _run(code: str, *args: str, entry: str = "script") -> subprocess.CompletedProcess[str]:
    program = (f"{PRELUDE}{code}\nsys.argv = ['patch-speculators', *{list(args)!r}]\n"
               f"from vllm_shim_patch.cli import {entry}\n{entry}()\n")
    return subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=False)


def test_output_and_exit_handlers_survive_the_skipped_teardown() -> None:
    r = _run("", "--version")
    assert (r.returncode, r.stderr) == (0, "")
    assert r.stdout == f"buffered patch-speculators, version {version('vllm-shim-patch')}\nexit handler ran\n"


def test_the_exit_code_of_an_error_is_kept() -> None:
    r = _run("", "--no-such-option")
    assert r.returncode == 2
    assert r.stdout == "buffered exit handler ran\n"
    assert r.stderr == ("patch-speculators: error: No such option '--no-such-option'. (see patch-speculators "
                        "--help)\n")


def test_the_console_run_collects_no_cycles_and_an_embedding_one_does() -> None:
    check = "atexit.register(lambda: print('collector on' if __import__('gc').isenabled() else 'collector off'))"
    assert _run(check, "--version").stdout.splitlines()[1] == "collector off"
    assert _run(check, "--version", entry="main").stdout.splitlines()[1] == "collector on"


def test_the_embedding_entry_keeps_the_teardown() -> None:
    """`main` (what CliRunner calls) exits the ordinary way: the finalizer runs at teardown, which
    the console script skips (the two tests above)."""
    r = _run("", "--version", entry="main")
    assert r.returncode == 0
    assert r.stdout == (f"buffered patch-speculators, version {version('vllm-shim-patch')}\n"
                        "exit handler ran\nteardown\n")


def test_a_thread_still_running_is_joined_as_at_an_ordinary_exit() -> None:
    # The thread runs until the ordinary exit's thread shutdown lets it go: still running when the
    # script decides how to leave, however long the import took.
    started = ("import threading\n"
               "let_go = threading.Event()\n"
               "threading._register_atexit(let_go.set)\n"
               "threading.Thread(target=lambda: (let_go.wait(), print('thread done'))).start()")
    r = _run(started, "--version")
    assert r.returncode == 0
    # An ordinary exit: the thread's line, then the exit handler's, then the teardown's.
    assert r.stdout == (f"buffered patch-speculators, version {version('vllm-shim-patch')}\n"
                        "thread done\nexit handler ran\nteardown\n")

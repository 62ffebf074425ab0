"""A temp folder the CLI makes is never left behind by an interrupt (`interrupts.temp_dir`), even
one that lands the instant the folder appears: inside `TemporaryDirectory`'s constructor, after
`mkdtemp` and before its cleanup is registered (tests/commands/test_interrupts.py signals the CLI
that instant; on a loaded machine its wheel test found the folder left)."""

from __future__ import annotations

import os
import signal
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from vllm_shim_patch import interrupts


@pytest.fixture
def signalled_as_made(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The CLI's handlers installed, temp folders made in `tmp_path`, and SIGINT sent to this
    process as `mkdtemp` returns (its handler runs at the next bytecode: inside the constructor)."""
    previous = interrupts.install()
    assert previous is not None  # the main thread: the handlers are the CLI's
    real: Callable[..., str] = tempfile.mkdtemp

    def mkdtemp(*args: object, **kwargs: object) -> str:
        path = real(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGINT)
        return path

    monkeypatch.setattr(tempfile, "mkdtemp", mkdtemp)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    try:
        yield tmp_path
    finally:
        interrupts.restore(previous)


def test_an_interrupt_as_the_folder_appears_leaves_nothing(signalled_as_made: Path) -> None:
    with pytest.raises(KeyboardInterrupt):
        with interrupts.temp_dir("vsp-test-"):
            pytest.fail("the body ran: the interrupt was lost")
    assert list(signalled_as_made.iterdir()) == []


def test_tempfiles_own_constructor_leaves_it(signalled_as_made: Path) -> None:
    """What `temp_dir` is for: the same interrupt in the standard library's constructor leaves a
    folder nothing owns."""
    with pytest.raises(KeyboardInterrupt):
        with tempfile.TemporaryDirectory(prefix="vsp-test-"):
            pytest.fail("the body ran: the interrupt was lost")
    assert [p.name.startswith("vsp-test-") for p in signalled_as_made.iterdir()] == [True]


def test_no_interrupt_is_the_standard_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with interrupts.temp_dir("vsp-test-") as made:
        assert Path(made).parent == tmp_path and Path(made).name.startswith("vsp-test-")
        (Path(made) / "file").write_bytes(b"x")
    assert list(tmp_path.iterdir()) == []

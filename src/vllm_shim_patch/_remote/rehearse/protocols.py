"""The interfaces of the rehearsal's two pluggable kinds, each a module: a release adapter
(`releases/`, one per range of vLLM releases whose internals agree, and one world of ranks:
one worker in this process, or one worker process per rank) and a model family
(`families/`, one per architecture family). A module of either table defines every member here,
the optional ones at their defaults included, so the run reads them without `hasattr`;
tests/remote/test_protocols.py holds every module of both tables to its protocol (member names
and signatures).

Standard library only (`typing`); nothing imports this module at run time: it is the interface
written down, for readers, type checkers and that test.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class ReleaseAdapter(Protocol):
    """The stand-ins and seams for a range of vLLM releases, chosen by what vLLM defines.

    `fits()` imports what it needs of vLLM and says None when the installed vLLM has every
    member the adapter builds on, else the first one missing (never by version string). The
    module imports no vLLM at module level. `build` makes the stand-ins (a value of the adapter's
    own type, "standins" below) and changes nothing of vLLM; `self_check` records each stand-in
    against the vLLM code it replaces (`run.check`); `install` puts them in place and `restore`
    undoes everything `install` did. The run then reads the workers (`workers`: a `Workers`), the
    reference model and its forward; a failure is told in the rank's own terms (`rank_failure`)."""

    NAME: str  # the adapter's name in the answer ("adapter")
    MULTI_RANK: bool  # runs a world of more than one rank (else exactly one)
    RUNNER: str  # the vLLM model runner it rehearses ("Model Runner V1", "Model Runner V2"), in the verdict
    REAL: list[str]  # what of vLLM runs as installed, reported verbatim
    STOOD_IN: list[str]  # what is stood in and why, reported verbatim

    def fits(self) -> str | None: ...

    def environment(self) -> dict[str, str]:
        """Variables to set before vLLM is imported, read from the installed files only (vLLM is
        not imported yet; {}: none, and none where the adapter will not fit)."""

    def build(self, on_forward: Callable[[], None]) -> Any:
        """The stand-ins; `on_forward()` is called once per model forward over scheduled tokens."""

    def self_check(self, run: Any, standins: Any) -> None: ...

    def install(self, standins: Any) -> None: ...

    def restore(self, standins: Any) -> None: ...

    def workers(self, run: Any, standins: Any, generator: Any) -> Any:
        """What the run reads of the generator's workers, wherever they run: a `Workers` (what
        it checks once they exist is recorded with `run.check`)."""

    def model_of(self, standins: Any) -> Any:
        """The model the reference forward runs (unsharded; once the generator's workers exist)."""

    def forward_of(self, standins: Any) -> Callable[..., Any]:
        """The runner's model call: (input ids, positions, segments, KV history) -> hidden states."""

    def worker_failure(self, standins: Any) -> BaseException | None:
        """The last exception a worker in this process raised, with its traceback (None: none)."""

    def rank_failure(self, standins: Any, outcome: str, failure: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """(outcome, failure) of a run that ended with `failure` seen from this process: a rank's
        own failure where one raised or died first, with how it surfaced here (else as given)."""

    def shutdown(self, standins: Any) -> None: ...


class Workers(Protocol):
    """The generator's workers as the run reads them, one in this process or one per rank."""

    topology: dict[str, Any]  # tensor/pipeline parallel sizes, world size, output rank, how they run
    model: Any  # the model the reference forward runs (the unsharded one)
    forward: Callable[..., Any]  # its forward: (input ids, positions, segments, KV history) -> states
    extension: type  # the worker class speculators' capture methods are read from (their code spans)
    # The generator's forwards run in this process (one in-process worker): the references are
    # computed alongside them by a forked child (`references.Forked`).
    in_process: bool

    def set_reorder(self, threshold: int | None) -> None:
        """Every runner reorders its batch as an attention backend with this threshold would."""

    def steps(self) -> list[dict[str, Any]]:
        """One record per forward of the runner so far (the output rank's)."""

    def holds(self) -> list[str]:
        """What any worker still holds after the call, or captured for no reader ([]: nothing)."""

    def after_call(self) -> None:
        """Read every worker's state after a call (`holds` answers from it); raise where a rank
        failed during the call and the generator was not told."""


@runtime_checkable
class Family(Protocol):
    """A model family: which architectures, how to build a tiny model of one, what it stands in.

    Standard library only at module level (the tool reads the table: `analysis/rehearse.py`);
    what needs vLLM or torch is imported inside the functions that use it."""

    NAME: str  # the family's `--arch` name (its PRESET)
    ARCHITECTURES: tuple[str, ...]  # config.json "architectures" it covers
    MODULES: tuple[str, ...]  # vLLM's model modules, registered in-process
    FIRST_RELEASE: dict[str, str]  # architecture -> first vLLM release whose registry has it
    PRESET: dict[str, Any]  # a published full-size config.json of the family
    PRESETS: dict[str, dict[str, Any]]  # further `--arch` names of the family ({}: none)
    SUMMARY: str  # what of the family is rehearsed (the README's table)
    REAL: list[str]  # reported verbatim
    STOOD_IN: list[str]  # reported verbatim
    WRAPPER: bool  # a multimodal wrapper: its language model's config is text_config
    TOKENIZER_CLASS: str | None  # the tiny tokenizer's class, where the processor needs one

    def shrink(self, config: dict[str, Any], max_model_len: int, vocab: int | None = None) -> dict[str, Any]:
        """The tiny config of the same architecture (`vocab`: the tiny tokenizer's, None: keep)."""

    def files(self, config: dict[str, Any]) -> dict[str, str]:
        """Files the tiny folder needs besides config.json and a tokenizer ({}: none)."""

    def special_tokens(self, config: dict[str, Any]) -> dict[str, int] | None:
        """Tokens the tokenizer must know by id (None: none)."""

    def self_check(self, run: Any, model: Any) -> None:
        """The family's own stand-ins against vLLM's classes (`run.check`; most have none)."""

"""A rank's failure, read rather than waited for (`releases/v1_engine/ranks.py`, no vLLM): each worker
process leaves its classified exception in a folder, the parent ends the rank that raised, and the
earliest failure is the run's, told with how it surfaced in the parent."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from vllm_shim_patch._remote.rehearse.answer import RankFailed
from vllm_shim_patch._remote.rehearse.releases.v1_engine import ranks


def _record(exc: BaseException | None, created: float, msg: str = "WorkerProc hit an exception.") -> logging.LogRecord:
    record = logging.LogRecord("vllm.v1.executor.multiproc_executor", logging.ERROR, __file__, 1, msg, (),
                               (type(exc), exc, None) if exc is not None else None)
    record.created = created
    return record


def _tap(folder: Path) -> ranks.FailureTap:
    return ranks.FailureTap(str(folder), lambda exc: ("failed", {"exception": f"{type(exc).__name__}: {exc}"}),
                            lambda: {"tp_rank": 1, "pp_rank": 0})


def test_a_worker_s_logged_exception_is_one_file_read_earliest_first(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ranks.multiprocessing, "current_process", lambda: type("P", (), {"name": "VllmWorker-1"})())
    tap = _tap(tmp_path)
    tap.emit(_record(RuntimeError("gloo: Connection closed by peer"), 20.5))
    tap.emit(_record(RuntimeError("rank 1 raises"), 20.4))
    tap.emit(_record(None, 21.0, "Worker proc VllmWorker-0 died unexpectedly"))  # no exception: not a failure
    assert sorted(p.name.split("-", 3)[-1] for p in tmp_path.iterdir()) == ["1.json", "2.json"]
    found = ranks.read(str(tmp_path))
    assert [(f["rank"], f["tp_rank"], f["pp_rank"], f["time"], f["failure"]["exception"]) for f in found] == [
        (1, 1, 0, 20.4, "RuntimeError: rank 1 raises"), (1, 1, 0, 20.5, "RuntimeError: gloo: Connection closed by peer")]
    assert found[0]["message"] == "WorkerProc hit an exception." and found[0]["outcome"] == "failed"


def test_a_tap_that_cannot_classify_breaks_nothing_of_vllm(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def broken(exc: BaseException) -> tuple[str, dict[str, str]]:
        raise ValueError("classify broke")

    ranks.FailureTap(str(tmp_path), broken, dict).emit(_record(RuntimeError("x"), 1.0))
    assert list(tmp_path.iterdir()) == []
    assert "ValueError: classify broke" in capsys.readouterr().err


def test_a_half_written_file_is_not_read(tmp_path: Path) -> None:
    (tmp_path / "rank-1-5-1.json.tmp").write_text("{")
    (tmp_path / "rank-0-4-1.json").write_text("{")
    assert ranks.read(str(tmp_path)) == []


def test_the_process_rank_is_vllm_s_worker_name() -> None:
    assert [ranks.process_rank(n) for n in ("VllmWorker-0", "VllmWorker-7", "MainProcess")] == [0, 7, -1]


def test_the_watcher_ends_the_rank_that_left_a_failure(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    (tmp_path / "rank-1-x-1.json").write_text(json.dumps({"rank": 1, "pid": proc.pid, "time": 1.0, "failure": {}}))
    watcher = ranks.Watcher(str(tmp_path))
    watcher.end_failed()
    watcher.end_failed()  # once per rank
    assert proc.wait(timeout=60) == -9
    assert watcher.ended == [proc.pid]


def test_the_death_tap_keeps_the_dead_workers_names_in_order() -> None:
    tap = ranks.DeathTap()
    for name in ("VllmWorker-1", "VllmWorker-0"):
        record = logging.LogRecord("x", logging.ERROR, __file__, 1, "Worker proc %s died unexpectedly, shutting down "
                                   "executor.", (name,), None)
        tap.emit(record)
    tap.emit(logging.LogRecord("x", logging.ERROR, __file__, 1, "WorkerProc hit an exception.", (), None))
    assert tap.names == ["VllmWorker-1", "VllmWorker-0"]


SURFACED = {"exception": "RuntimeError: cancelled", "speculators_frame": {"file": "gen.py", "line": 269},
            "side": "main"}


def test_the_earliest_rank_failure_is_the_run_s_told_with_how_it_surfaced() -> None:
    found = [{"rank": 1, "tp_rank": 1, "pp_rank": 0, "time": 1.0, "outcome": "failed",
              "failure": {"exception": "IndexError: list index out of range", "speculators_frame": None,
                          "vllm_frame": {"file": "vllm/v1/worker/worker_base.py", "line": 313}}}]
    outcome, failure = ranks.explain(found, ["VllmWorker-1"], {1: -9}, "cannot_rehearse", SURFACED)
    assert outcome == "failed"
    assert failure == {"exception": "IndexError: list index out of range", "speculators_frame": SURFACED["speculators_frame"],
                       "vllm_frame": {"file": "vllm/v1/worker/worker_base.py", "line": 313}, "side": "worker",
                       "rank": 1, "tp_rank": 1, "pp_rank": 0, "surfaced_as": SURFACED}


def test_a_worker_that_died_is_a_failure_with_its_exit_status() -> None:
    outcome, failure = ranks.explain([], ["VllmWorker-1"], {0: 0, 1: 7}, "failed", SURFACED)
    assert (outcome, failure["exception"], failure["rank"], failure["exit_status"]) == (
        "failed", "worker rank 1 (VllmWorker-1) died with exit status 7", 1, 7)
    assert failure["speculators_frame"] == SURFACED["speculators_frame"] and failure["surfaced_as"] == SURFACED


def test_without_a_rank_failure_the_parent_s_is_the_run_s() -> None:
    assert ranks.explain([], [], {}, "cannot_rehearse", SURFACED) == ("cannot_rehearse", SURFACED)


STATES = [
    {"rank": 0, "tp_rank": 0, "captured_states": False, "request_metadata": 0, "replies": [None]},
    {"rank": 1, "tp_rank": 1, "captured_states": True, "request_metadata": 2,
     "replies": [{"sequences": 2, "rows": 1058}]},
]


def test_what_each_rank_replied_and_what_it_holds_are_named_by_rank() -> None:
    assert ranks.replies(STATES) == ["rank 0 replied no captured states", "rank 1 replied 2 sequences (1,058 rows)"]
    assert ranks.holds(STATES) == ["_captured_states on rank 1", "_request_metadata on rank 1",
                                   "1,058 rows captured on rank 1 that the generator never reads"]
    assert ranks.holds([{**STATES[0], "replies": [{"sequences": 2, "rows": 58}]}]) == []  # rank 0's are read
    assert ranks.replies([{"rank": 0, "replies": [{"layers": 2, "rows": 58}]}]) == ["rank 0 replied 2 layers (58 rows)"]


def test_a_rank_failure_the_generator_was_not_told_is_a_failure_of_the_run() -> None:
    from vllm_shim_patch._remote.rehearse import frames

    try:
        raise RankFailed("rank 1 raised, and vLLM read no reply from it: RuntimeError: x")
    except RankFailed as e:
        outcome, failure = frames.classify(e, "verify-1", "/nowhere/speculators", "/nowhere/vllm")
    assert outcome == "failed" and "stand_in" not in failure


def test_a_failure_every_rank_raised_at_the_same_place_is_no_one_rank_s() -> None:
    gate = {"exception": "ValueError: Model X does not support hidden state extraction",
            "speculators_frame": {"file": "custom_worker.py", "line": 171}}
    found = [{"rank": r, "tp_rank": r, "pp_rank": 0, "time": t, "outcome": "failed", "failure": gate}
             for r, t in ((1, 1.0), (0, 1.1))]
    assert ranks.explain(found, [], {}, "failed", SURFACED, [0, 1])[1]["every_rank"] is True
    assert "every_rank" not in ranks.explain(found[:1], [], {}, "failed", SURFACED, [0, 1])[1]


def test_states_captured_on_other_ranks_than_rank_0_are_named() -> None:
    assert ranks.captured_elsewhere(STATES) == [1]  # rank 0 captured none, rank 1 did
    assert ranks.captured_elsewhere([{**STATES[0], "replies": [{"sequences": 2, "rows": 58}]}, STATES[1]]) == []
    assert ranks.captured_elsewhere([STATES[0], {**STATES[1], "replies": [None]}]) == []  # no one did


def test_whether_rank_0_captured_is_read_from_its_replies() -> None:
    assert ranks.rank0_captured(STATES) is False  # rank 1 captured, rank 0 none
    assert ranks.rank0_captured([{**STATES[0], "replies": [{"sequences": 2, "rows": 58}]}, STATES[1]]) is True
    assert ranks.rank0_captured([STATES[0], {**STATES[1], "replies": [None]}]) is False  # no one did

"""A rank's failure, read rather than waited for (standard library only: tested without vLLM).

vLLM's WorkerProc logs every exception of an RPC ("WorkerProc hit an exception.") and of its
start ("WorkerProc failed to start.") with `logger.exception`, then replies `str(e)` only where it
is the reply rank, and to nobody when the caller named another rank (`unique_reply_rank=0`: a
failure of rank 1 is never read). If the RPC holds a collective, the other ranks block in it and
the reply rank never answers: the caller waits for ever. So every worker process classifies its
own exception where its traceback is (`FailureTap`) and leaves it in a folder; the parent reads
the folder (`Watcher`), ends the rank that raised, and vLLM's own worker monitor then shuts the
executor down as for any dead worker, which cancels the wait. The earliest failure by the time it
was logged is the cause (a peer's "Connection closed by peer" comes after).
"""

import glob
import json
import logging
import multiprocessing
import os
import signal
import threading


# What vLLM's MultiprocWorkerMonitor logs when a worker process ends on its own (the process name
# is its first argument: VllmWorker-{rank}).
DIED = "died unexpectedly"
WORKER_PREFIX = "VllmWorker-"


def process_rank(name=None):
    """This process's rank as vLLM names its worker processes (VllmWorker-{rank}); -1 elsewhere."""
    name = multiprocessing.current_process().name if name is None else name
    return int(name[len(WORKER_PREFIX):]) if name.startswith(WORKER_PREFIX) else -1


class FailureTap(logging.Handler):
    """In a worker process: each exception vLLM logs, classified here, as one JSON file in `folder`.

    `classify(exc) -> (outcome, failure)`; `group_ranks() -> {"tp_rank", "pp_rank"}`."""

    def __init__(self, folder, classify, group_ranks):
        super().__init__(level=logging.ERROR)
        self.folder, self.classify, self.group_ranks = folder, classify, group_ranks
        self.count = 0

    def emit(self, record):
        exc = record.exc_info[1] if record.exc_info else None
        if exc is None:
            return
        try:
            outcome, failure = self.classify(exc)
            self.count += 1
            rank = process_rank()
            found = {"rank": rank, "pid": os.getpid(), "time": record.created, "message": record.getMessage(),
                     "outcome": outcome, "failure": failure, **self.group_ranks()}
            path = os.path.join(self.folder, f"rank-{rank}-{os.getpid()}-{self.count}.json")
            with open(path + ".tmp", "w") as f:
                json.dump(found, f, default=str)
            os.replace(path + ".tmp", path)  # the reader sees it whole or not at all
        except Exception:  # noqa: BLE001 - the tap must never break vLLM's own handling
            import traceback

            traceback.print_exc()


def read(folder):
    """Every failure the ranks left in `folder`, earliest first."""
    found = []
    for path in glob.glob(os.path.join(folder, "rank-*.json")):
        try:
            with open(path) as f:
                found.append(json.load(f))
        except (OSError, ValueError):
            continue
    return sorted(found, key=lambda r: r["time"])


class Watcher:
    """In the parent, while the run waits inside vLLM: every rank that left a failure is ended
    (SIGKILL, by its pid), so vLLM's own worker monitor shuts the executor down and the caller's
    wait is cancelled instead of hanging."""

    def __init__(self, folder, poll=0.1):
        self.folder, self.poll = folder, poll
        self.ended = []  # pids ended
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="vsp-rank-failures")

    def start(self):
        self._thread.start()

    def stop(self):
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)

    def _loop(self):
        while not self._stop.is_set():
            self.end_failed()
            self._stop.wait(self.poll)

    def end_failed(self):
        for found in read(self.folder):
            pid = found.get("pid")
            if pid and pid not in self.ended:
                self.ended.append(pid)
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


class DeathTap(logging.Handler):
    """In the parent: the names of the worker processes vLLM's monitor saw die, in order."""

    def __init__(self):
        super().__init__(level=logging.ERROR)
        self.names = []

    def emit(self, record):
        if DIED in str(record.msg) and record.args:
            self.names.append(str(record.args[0]))


def explain(failures, deaths, exit_codes, outcome, failure, world=()):
    """(outcome, failure) of a run that ended with `failure` seen in the parent: the earliest
    rank failure with how it surfaced, else the first worker that died with its exit status,
    else as given. `exit_codes`: {rank: exit status}; `world`: every rank of the run (where each
    raised the same, at the same place, the failure says so: it is no one rank's)."""
    if failures:
        first = failures[0]
        same = {f["rank"] for f in failures if _same(f["failure"], first["failure"])}
        out = {**first["failure"], "side": "worker", "rank": first["rank"], "tp_rank": first.get("tp_rank"),
               "pp_rank": first.get("pp_rank"), "surfaced_as": failure}
        if len(world) > 1 and same >= set(world):
            out["every_rank"] = True
        if not out.get("speculators_frame"):
            # Raised in vLLM on the worker: speculators' frame is the call that made the RPC.
            out["speculators_frame"] = failure.get("speculators_frame")
        return first["outcome"], out
    if deaths:
        rank = process_rank(deaths[0])
        status = exit_codes.get(rank)
        return "failed", {
            "exception": f"worker rank {rank} ({deaths[0]}) died with exit status {status}",
            "rank": rank, "exit_status": status, "side": "worker",
            "speculators_frame": failure.get("speculators_frame"), "vllm_frame": None, "surfaced_as": failure}
    return outcome, failure


def _same(a, b):
    return a.get("exception") == b.get("exception") and a.get("speculators_frame") == b.get("speculators_frame")


def replies(states):
    """One phrase per rank: what it answered speculators' read of the capture during the call."""
    out = []
    for s in states:
        got = [r for r in s.get("replies") or () if r]
        what = ("no captured states" if not got else
                "; ".join(f"{r['sequences']} sequences ({r['rows']:,} rows)" if "sequences" in r
                          else f"{r['layers']} layers ({r['rows']:,} rows)" for r in got))
        out.append(f"rank {s['rank']} replied {what}")
    return out


def captured_elsewhere(states):
    """The ranks that captured rows when tensor parallel rank 0, the one speculators captures
    on, captured none ([]: rank 0 did, or no one did)."""
    rows = {s["rank"]: sum(r.get("rows", 0) for r in s.get("replies") or () if r) for s in states}
    first = [s["rank"] for s in states if s.get("tp_rank") == 0]
    if any(rows.get(r) for r in first):
        return []
    return sorted(r for r, n in rows.items() if n)


def rank0_captured(states):
    """Whether tensor parallel rank 0, the rank speculators captures on, captured rows: where the
    generator then failed, its read of the capture did not take rank 0's reply alone."""
    return any(r.get("rows", 0) for s in states if s.get("tp_rank") == 0 for r in s.get("replies") or () if r)


def holds(states):
    """What any rank still holds after a call, or captured for no reader ([]: nothing)."""
    out = []
    for s in states:
        if s.get("captured_states"):
            out.append(f"_captured_states on rank {s['rank']}")
        if s.get("request_metadata"):
            out.append(f"_request_metadata on rank {s['rank']}")
        if s.get("tp_rank") not in (0, None):
            rows = sum(r.get("rows", 0) for r in s.get("replies") or () if r)
            if rows:
                out.append(f"{rows:,} rows captured on rank {s['rank']} that the generator never reads")
    return out

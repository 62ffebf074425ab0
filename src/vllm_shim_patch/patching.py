"""The user's workflows: plan, apply (a transaction), check, rollback, history."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .baseline import (
    Log,
    commit_message,
    listing,
    original_bytes,
    package_of,
    prepare,
    read_trailers,
    record_mismatches,
    recover,
    sync_state,
)
from .errors import OverlayError, TargetError
from .faults import checkpoint
from .fsutil import hash_file, record_hash
from .report_text import agree, plural

if TYPE_CHECKING:
    from .cli import Settings
    from .overlay import Overlay
    from .plan import Plan
    from .target import Target


@dataclass
class Outcome:
    text: str
    data: dict[str, Any] = field(default_factory=dict)
    exit_code: int = 0

    @property
    def ok(self) -> bool:
        return self.exit_code == 0




def _quiet(_: str) -> None:
    pass


# ------------------------------------------------------------------------------------ helpers


def load(s: Settings) -> tuple[Target, Any]:
    """The target and the rules; the target interpreter answers while libcst imports here."""
    from concurrent.futures import ThreadPoolExecutor

    from .rules import load_pack
    from .target import probe

    with ThreadPoolExecutor(max_workers=1) as pool:
        target = pool.submit(probe, s.python, s.package)
        pack = load_pack(s.rules)  # a bad rule file is reported before the target's answer is read
        import libcst  # noqa: F401  (every caller of load runs the engine next)

        return target.result(), pack


def signatures_for(s: Settings, target: Target, pack: Any) -> tuple[Any, str | None]:
    """The installed vLLM's signatures of every rule callee: (qualname → Signature | None, kind)."""
    from .guard import signature_source

    if s.extra.get("no_guard"):
        return None, None
    source = signature_source(s, target)
    if source is None:
        return None, None
    calls = sorted({c for r in pack.rules for c in r.calls})
    return source.get_many(calls), source.kind


def open_overlay(s: Settings, target: Target) -> Overlay:
    from .overlay import Overlay, overlay_path, state_root

    return Overlay(overlay_path(state_root(s.state_dir), target.package, target.location), target.location)


def refuse_editable(target: Target) -> None:
    if target.editable:
        raise TargetError(
            f"{target.package} is installed in editable mode from {target.editable}: "
            f"patch that source checkout with git instead"
        )


def check_writable(target: Target, paths: list[str]) -> None:
    for path in paths:
        full = target.location / path
        if full.is_symlink():
            # A linked install (uv --link-mode=symlink): replacing the link would detach it, and
            # the overlay would record the link, not the bytes RECORD describes.
            raise TargetError(
                f"{full} is a symbolic link (a linked install?): reinstall {target.package} with copied "
                f"files (e.g. uv --link-mode=copy) to patch it; nothing was changed"
            )
        if not os.access(full.parent, os.W_OK) or (full.exists() and not os.access(full, os.W_OK)):
            raise TargetError(
                f"cannot write {full} (read-only): run as the owner of that environment; nothing was changed"
            )


def desired_files(plan: Plan, originals: dict[str, bytes]) -> dict[str, bytes]:
    desired = dict(originals)
    desired.update({r.path: r.after for r in plan.changed})
    return desired


def pending_writes(target: Target, desired: dict[str, bytes]) -> dict[str, bytes]:
    return {p: data for p, data in desired.items() if hash_file(target.location / p) != record_hash(data)}


# ------------------------------------------------------------------------------------ commands


def plan_for(s: Settings, vllm_version: str | None) -> Plan:
    """The dry-run: what apply would write, computed from the original bytes; nothing changes."""
    from .plan import make_plan

    target, pack = load(s)
    signatures, kind = signatures_for(s, target, pack)
    ov = open_overlay(s, target)
    originals = original_bytes(ov, target, target.python_files())
    return make_plan(target, pack, vllm_version, signatures, kind, files=originals)


def check(s: Settings, vllm_version: str | None) -> Outcome:
    plan = plan_for(s, vllm_version)
    target = plan.target
    ov = open_overlay(s, target)
    originals = original_bytes(ov, target, target.python_files())
    pending = sorted(pending_writes(target, desired_files(plan, originals)))
    who = f"{target.package} {target.version}"
    from .report import site_lines

    human = [line for line in site_lines(plan) if "[needs-human" in line or "[notice" in line
             or ": skipped: " in line or ": failed: " in line]
    data = {"ok": not pending and plan.clean, "pending": pending, "vllm": str(plan.version),
            "rules": plan.rule_ids, "for_a_human": human}
    if pending:
        text = (f"{who} is not patched for vLLM {plan.version}: {plural(len(pending), 'file')} would change "
                f"({listing(pending)}); run patch-speculators --vllm-version {plan.version}")
        return Outcome(text, data, 1)
    if not plan.clean:
        # Patched as far as the rules go, but a call the rules cannot fix would still fail at run time.
        left = len(plan.needs_human) + len(plan.notices) + len(plan.problems)
        text = "\n".join([*human, f"{who} is patched for vLLM {plan.version}, but {plural(left, 'place')} "
                                   f"{agree(left, 'needs', 'need')} a human (above)"])
        return Outcome(text, data, 1)
    return Outcome(f"{who} is patched for vLLM {plan.version} ({len(plan.edited)} edits in place)", data, 0)


Review = Callable[[list[Any]], set[tuple[str, int, str]]]


def apply(s: Settings, vllm_version: str | None, *, verify: bool = True, accept_modified: bool = False,
          wait: bool = False, log: Log = _quiet, review: Review | None = None) -> Outcome:
    """Plan from the original bytes, write atomically, verify, then commit; restore on failure."""
    from .overlay import tracked_paths
    from .plan import make_plan
    from .report import site_lines, summary

    target, pack = load(s)
    refuse_editable(target)
    signatures, kind = signatures_for(s, target, pack)
    ov = open_overlay(s, target)
    files = tracked_paths(e.path for e in target.record)
    with ov.locked(wait):
        recover(ov, target, files, log)
        files = prepare(ov, target, accept_modified, log)
        originals = original_bytes(ov, target, target.python_files())
        plan = make_plan(target, pack, vllm_version, signatures, kind, files=originals)
        if review is not None and plan.changed:
            from .report import hunks

            declined = review([h for r in plan.changed for h in hunks(r)])
            if declined:
                plan = make_plan(target, pack, vllm_version, signatures, kind, files=originals,
                                 declined=frozenset(declined))
        if plan.version_note:
            log(f"note: {plan.version_note}")
        for line in site_lines(plan):
            log(line)
        writes = pending_writes(target, desired_files(plan, originals))
        who = f"{target.package} {target.version}"
        base = {"package": who, "vllm": str(plan.version), "signatures": kind, "rules": plan.rule_ids,
                "files": sorted(writes), "sites": len(plan.edited)}
        code = 0 if plan.clean else 1
        state = ov.state()
        assert state is not None
        recorded = all(hash_file(target.location / p) == state.head.get(p) for p in files)
        refused = [x for x in plan.sites if x.action == "declined"]
        if not writes and recorded and refused:
            return Outcome(f"nothing written: {plural(len(refused), 'change')} declined in review",
                           {**base, "changed": False, "declined": len(refused)}, code)
        if not writes and recorded:
            return Outcome(f"{who} is already patched for vLLM {plan.version}: nothing to do ({summary(plan)})",
                           {**base, "changed": False}, code)
        head = ov.head_commit()
        assert head is not None
        if writes:
            check_writable(target, sorted(writes))
            try:
                ov.write_files("apply", writes, head, package=who)
            except OSError as exc:
                restored, _ = ov.restore(head, sorted(writes))
                ov.clear_journal()
                raise TargetError(
                    f"cannot write {exc.filename or 'a file'}: {exc.strerror or exc}; "
                    f"restored {plural(len(restored), 'file')}, nothing was changed"
                ) from None
        verdict = "skipped (--no-verify)"
        if verify:
            from .verify import verify_plan

            try:
                result = verify_plan(target, plan, s)
            except BaseException:
                # Verification could not run (or was interrupted): leave nothing half-done behind.
                ov.restore(head, sorted(writes))
                ov.clear_journal()
                raise
            for line in result.lines:
                log(line)
            if not result.ok:
                restored, _ = ov.restore(head, sorted(writes))
                ov.clear_journal()
                return Outcome(
                    f"verification failed: {result.reason}; restored {plural(len(restored), 'file')}, nothing recorded",
                    {**base, "changed": False, "verify": result.data}, 1,
                )
            verdict = result.summary
            checkpoint("apply:verified")
        guard = f"guarded by {kind} signatures" if kind else "unguarded"
        message = commit_message(
            "patch",
            f"patch {who} for vLLM {plan.version} ({guard})",
            [f"Rules: {', '.join(plan.rule_ids) or '(none: back to original bytes)'}",
             f"Files: {', '.join(sorted(writes))}"],
            {"Package": who, "Vllm": f"{plan.version} (installed {target.vllm_version})" if target.vllm_version else f"{plan.version} (no vLLM installed)",
             "Guard": kind or "unguarded", "Rules": ",".join(plan.rule_ids), "Verify": verdict},
        )
        ov.commit(files, message, tag="patched")
        sync_state(ov, target, files)
        ov.clear_journal()
    text = f"patched {who} for vLLM {plan.version}: {summary(plan)}; verification {verdict}"
    return Outcome(text, {**base, "changed": True, "verify": verdict}, code)


def rollback(s: Settings, to: str | None, *, wait: bool = False, log: Log = _quiet) -> Outcome:
    from .target import probe

    target = probe(s.python, s.package)
    refuse_editable(target)
    ov = open_overlay(s, target)
    who = f"{target.package} {target.version}"
    from .overlay import tracked_paths

    files = tracked_paths(e.path for e in target.record)
    if not ov.exists():
        bad = record_mismatches(target, files)
        if bad:
            return Outcome(f"{who} is not tracked by this tool, and {plural(len(bad), 'file')} "
                           f"{agree(len(bad), 'differs', 'differ')} from RECORD: "
                           f"{listing(bad)}; reinstall it with pip", {"changed": False, "record_mismatch": bad}, 1)
        return Outcome(f"{who} is not tracked: it was never patched here and matches its RECORD; nothing to do",
                       {"changed": False}, 0)
    with ov.locked(wait):
        recover(ov, target, files, log)
        state = ov.state()
        if state is None or state.data.get("head_commit") != ov.head_commit():
            sync_state(ov, target, files)
            state = ov.state()
        assert state is not None
        if state.data.get("version") != target.version or state.files != files:
            # Another version was installed under us: its own files are its original.
            files = prepare(ov, target, accept_modified=True, log=log)
        else:
            edited = [p for p in files if hash_file(target.location / p) != state.head.get(p)]
            if edited and not record_mismatches(target, files):
                # Every file is what pip wrote: a reinstall, which is the new original.
                files = prepare(ov, target, accept_modified=False, log=log)
            elif edited:
                # Edits made outside the tool are about to be overwritten: keep them in the history.
                saved = ov.commit(files, commit_message("drift", f"edits made outside this tool to {who}",
                                                        [f"Files: {listing(edited)}"], {"Package": who}))
                log(f"saved {plural(len(edited), 'file')} changed outside this tool as overlay commit {saved[:12]}")
        to_commit = ov.resolve(to or "original")
        recorded = package_of(read_trailers(ov, to_commit))
        if recorded and recorded != (target.package, target.version):
            raise OverlayError(
                f"{to or 'original'} is a state of {' '.join(recorded)}, but {who} is installed: roll back "
                f"within the installed version, or reinstall {' '.join(recorded)} first"
            )
        wanted = ov.tree_files(to_commit, files)
        writes = {p: d for p, d in wanted.items()
                  if d is not None and hash_file(target.location / p) != record_hash(d)}
        label = to or "original"
        if writes:
            check_writable(target, sorted(writes))
            head = ov.head_commit()
            assert head is not None
            message = commit_message("rollback", f"rollback {who} to {label} ({to_commit[:12]})",
                                     [f"Files: {', '.join(sorted(writes))}"], {"Package": who, "To": to_commit})
            ov.write_files("rollback", writes, head, to_commit=to_commit, message=message, package=who)
            ov.commit(files, message)
            sync_state(ov, target, files)
            ov.clear_journal()
    data: dict[str, Any] = {"changed": bool(writes), "to": label, "commit": to_commit, "files": sorted(writes)}
    if to is None:
        bad = record_mismatches(target, files)
        data["record_mismatch"] = bad
        checked = sum(1 for e in target.record if e.hash and e.path in files)
        if bad:
            return Outcome(f"rolled back {who} to the overlay's original, but {plural(len(bad), 'file')} "
                           f"{agree(len(bad), 'differs', 'differ')} from RECORD "
                           f"(that original was accepted as modified): {listing(bad)}", data, 1)
        tail = f"sha256 equal to RECORD for all {checked} files"
    else:
        tail = f"now at {to_commit[:12]}"
    if not writes:
        return Outcome(f"{who} is already at {label}: nothing to do ({tail})", data, 0)
    return Outcome(f"rolled back {who} to {label}: restored {plural(len(writes), 'file')}; {tail}", data, 0)


def history(s: Settings) -> Outcome:
    from .target import probe

    target = probe(s.python, s.package)
    ov = open_overlay(s, target)
    if not ov.exists():
        return Outcome(f"{target.package} {target.version} is not tracked: no history", {"commits": []}, 0)
    raw = ov.git("log", "--format=%H%x09%cI%x09%D%x09%s")
    commits = []
    lines = []
    for row in raw.splitlines():
        sha, when, refs, subject = row.split("\t", 3)
        tags = [r.strip().removeprefix("tag: ") for r in refs.split(",") if r.strip().startswith("tag: ")]
        commits.append({"commit": sha, "when": when, "tags": tags, "subject": subject})
        lines.append(f"{sha[:12]} {when[:19].replace('T', ' ')} {subject}" + (f" [{', '.join(tags)}]" if tags else ""))
    return Outcome("\n".join(lines), {"overlay": str(ov.gitdir), "commits": commits}, 0)

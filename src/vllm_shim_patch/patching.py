"""The user's workflows: plan, apply (a transaction), check, rollback, history."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import __version__
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


Log = Callable[[str], None]


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
        if not os.access(full.parent, os.W_OK) or (full.exists() and not os.access(full, os.W_OK)):
            raise TargetError(
                f"cannot write {full} (read-only): run as the owner of that environment; nothing was changed"
            )


def record_mismatches(target: Target, files: list[str]) -> list[str]:
    """Files whose bytes differ from the sha256 RECORD lists (pip never checks this; we do)."""
    hashes = {e.path: e.hash for e in target.record}
    return [p for p in files if hashes.get(p) and hash_file(target.location / p) != hashes[p]]


def _listing(paths: list[str], limit: int = 5) -> str:
    shown = ", ".join(paths[:limit])
    return shown + (f" and {len(paths) - limit} more" if len(paths) > limit else "")


def commit_message(kind: str, title: str, body: list[str], trailers: dict[str, str]) -> str:
    lines = [title, ""]
    if body:
        lines += body + [""]
    lines += [f"Vsp-{k}: {v}" for k, v in {"Kind": kind, **trailers, "Tool": f"vllm-shim-patch {__version__}"}.items()]
    return "\n".join(lines) + "\n"


def read_trailers(ov: Overlay, commit: str) -> dict[str, str]:
    trailers = {}
    for line in ov.git("log", "-1", "--format=%B", commit).splitlines():
        if line.startswith("Vsp-") and ": " in line:
            key, _, value = line.partition(": ")
            trailers[key[4:].lower()] = value.strip()
    return trailers


def sync_state(ov: Overlay, target: Target, files: list[str]) -> None:
    """Rebuild state.json from git: HEAD and `original` trees, and HEAD's trailers."""
    head = ov.head_commit()
    if head is None:
        return
    original = ov.resolve("original")
    trailers = read_trailers(ov, head)
    if trailers.get("kind") == "rollback" and trailers.get("to"):
        # A rollback to an earlier patched state is that state: describe it by its own commit.
        trailers = {**read_trailers(ov, trailers["to"]), "restored_by": head}
    when = ov.git("log", "-1", "--format=%cI", head).strip()

    def hashes(commit: str) -> dict[str, str | None]:
        return {p: (record_hash(d) if d is not None else None) for p, d in ov.tree_files(commit, files).items()}

    ov.save_state(
        files=files,
        head=hashes(head),
        original=hashes(original),
        head_commit=head,
        original_commit=original,
        trailers=trailers,
        when=when,
        package=target.package,
        version=target.version,
        location=str(target.location),
    )


def recover(ov: Overlay, target: Target, files: list[str], log: Log) -> None:
    """Finish or undo what a killed apply or rollback left; say so."""
    if not ov.exists():
        return
    journal = ov.journal()
    ov.reset_index()
    if journal is None:
        return
    head = ov.head_commit()
    paths = sorted(journal["files"])
    pid = journal.get("pid", "?")
    if journal["op"] == "apply":
        if head != journal["base_commit"]:
            log(f"finished an interrupted apply (pid {pid}): its commit was recorded")
        else:
            restored = ov.restore(journal["base_commit"], paths)
            log(f"undid an interrupted apply (pid {pid}): restored {len(restored)} of {len(paths)} files")
    else:
        ov.restore(journal["to_commit"], paths)
        if head == journal["base_commit"]:
            ov.commit(files, journal["message"])
        log(f"finished an interrupted rollback (pid {pid})")
    sync_state(ov, target, files)
    ov.clear_journal()


def prepare(ov: Overlay, target: Target, accept_modified: bool, log: Log) -> list[str]:
    """Make sure the overlay's HEAD is what is installed: create it, or start a new baseline on drift."""
    from .overlay import tracked_paths

    files = tracked_paths(e.path for e in target.record)
    current = {p: hash_file(target.location / p) for p in files}
    who = f"{target.package} {target.version}"
    state = None
    if ov.exists():
        state = ov.state()
        if state is None or state.data.get("head_commit") != ov.head_commit():
            sync_state(ov, target, files)
            state = ov.state()
        assert state is not None
        if state.files == files and all(current[p] == state.head.get(p) for p in files):
            return files
    # A new original is about to be recorded: it must be what pip installed, unless the user says so.
    mismatched = record_mismatches(target, files)
    verified = ("RECORD verified" if not mismatched
                else f"accepted as modified: {plural(len(mismatched), 'file')} "
                     f"{agree(len(mismatched), 'differs', 'differ')} from RECORD")
    trailers = {"Package": who, "Record": "verified" if not mismatched else "modified: " + ",".join(mismatched)}
    if state is None:
        if mismatched and not accept_modified:
            raise OverlayError(
                f"{plural(len(mismatched), 'file')} of {who} {agree(len(mismatched), 'differs', 'differ')} "
                f"from its RECORD (edited by hand already?): "
                f"{_listing(mismatched)}; run again with --accept-modified to take them as the original, or "
                f"reinstall with pip install --force-reinstall --no-deps {target.package}=={target.version}"
            )
        ov.create(files, commit_message("baseline", f"original: {who} as installed ({verified})",
                                        [f"Location: {target.location}"], trailers), {})
        sync_state(ov, target, files)
        log(f"recorded the original {who} in the overlay {ov.path}")
        return files
    changed = sorted(p for p in {*files, *state.files} if current.get(p) != state.head.get(p))
    if not mismatched:
        # Every installed file is what pip wrote: a reinstall (same or other version) under us.
        reason = (f"{target.package} changed from {state.data.get('version')} to {target.version}"
                  if state.data.get("version") != target.version
                  else f"{who} was reinstalled ({plural(len(changed), 'file')} changed, all match RECORD)")
        ov.commit(sorted({*files, *state.files}),
                  commit_message("baseline", f"original: {who} reinstalled ({verified})",
                                 [f"Drift: {reason}: {_listing(changed)}"], trailers),
                  tag="original")
        sync_state(ov, target, files)
        log(f"{reason}: recorded the installed files as the new original; history kept")
        return files
    by_hand = [p for p in changed if p in mismatched]
    if not accept_modified:
        raise OverlayError(
            f"{plural(len(by_hand), 'file')} of {who} changed outside this tool since its last run "
            f"(edited by hand?): {_listing(by_hand)}; run rollback to restore the original, or run again "
            f"with --accept-modified to keep those edits as part of the original"
        )
    verified = f"accepted as modified: {_listing(by_hand)}"
    trailers["Record"] = "modified: " + ",".join(by_hand)
    # Keep the user's edits twice: as they are (history), and inside the new original.
    ov.commit(sorted({*files, *state.files}),
              commit_message("drift", f"edits made outside this tool to {who}", [f"Files: {_listing(by_hand)}"],
                             {"Package": who}))
    edited = {p: (target.location / p).read_bytes() for p in by_hand}
    ov.commit_tree(ov.resolve("original"), edited,
                   commit_message("baseline", f"original: {who} with edits accepted", [verified], trailers),
                   tag="original")
    ov.reset_index()
    sync_state(ov, target, files)
    log(f"kept {plural(len(by_hand), 'file')} edited outside this tool as part of the original")
    return files


def original_bytes(ov: Overlay | None, target: Target, paths: list[str]) -> dict[str, bytes]:
    """The original bytes of `paths`: from disk where they match `original`, else from git."""
    state = ov.state() if ov is not None and ov.exists() else None
    original = (state.original or state.head) if state else {}
    out: dict[str, bytes] = {}
    from_git = []
    for path in paths:
        data = (target.location / path).read_bytes()
        if state is None or record_hash(data) == original.get(path):
            out[path] = data
        else:
            from_git.append(path)
    if from_git:
        assert ov is not None
        commit = ov.resolve("original")
        for path, blob in ov.tree_files(commit, from_git).items():
            if blob is not None:
                out[path] = blob
    return out


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
    data = {"ok": not pending, "pending": pending, "vllm": str(plan.version), "rules": plan.rule_ids}
    if pending:
        text = (f"{who} is not patched for vLLM {plan.version}: {plural(len(pending), 'file')} would change "
                f"({_listing(pending)}); run patch-speculators --vllm-version {plan.version}")
        return Outcome(text, data, 1)
    return Outcome(f"{who} is patched for vLLM {plan.version} ({len(plan.edited)} edits in place)", data, 0)


def apply(s: Settings, vllm_version: str | None, *, verify: bool = True, accept_modified: bool = False,
          wait: bool = False, log: Log = _quiet) -> Outcome:
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
        if not writes and recorded:
            return Outcome(f"{who} is already patched for vLLM {plan.version}: nothing to do ({summary(plan)})",
                           {**base, "changed": False}, code)
        head = ov.head_commit()
        assert head is not None
        if writes:
            check_writable(target, sorted(writes))
            try:
                ov.write_files("apply", writes, head)
            except OSError as exc:
                restored = ov.restore(head, sorted(writes))
                ov.clear_journal()
                raise TargetError(
                    f"cannot write {exc.filename or 'a file'}: {exc.strerror or exc}; "
                    f"restored {plural(len(restored), 'file')}, nothing was changed"
                ) from None
        verdict = "skipped (--no-verify)"
        if verify:
            from .verify import verify_plan

            result = verify_plan(target, plan, s)
            for line in result.lines:
                log(line)
            if not result.ok:
                restored = ov.restore(head, sorted(writes))
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
                           f"{_listing(bad)}; reinstall it with pip", {"changed": False, "record_mismatch": bad}, 1)
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
            if edited:
                # Edits made outside the tool are about to be overwritten: keep them in the history.
                saved = ov.commit(files, commit_message("drift", f"edits made outside this tool to {who}",
                                                        [f"Files: {_listing(edited)}"], {"Package": who}))
                log(f"saved {plural(len(edited), 'file')} changed outside this tool as overlay commit {saved[:12]}")
        to_commit = ov.resolve(to or "original")
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
            ov.write_files("rollback", writes, head, to_commit=to_commit, message=message)
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
                           f"(that original was accepted as modified): {_listing(bad)}", data, 1)
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


def verify_installed(s: Settings, *, all_calls: bool = False) -> Outcome:
    """`verify`: the modules the patch changed and the calls it rewrote (--all: every one)."""
    from .calls import rewritten, scan
    from .target import probe
    from .verify import module_name, run_checks

    target = probe(s.python, s.package)
    ov = open_overlay(s, target)
    pyfiles = target.python_files()
    originals = original_bytes(ov, target, pyfiles)
    current = {p: (target.location / p).read_bytes() for p in pyfiles}
    changed = [p for p in pyfiles if current[p] != originals.get(p, current[p])]
    if all_calls:
        # A package's __main__ runs its CLI when imported: it is not a module to smoke-test.
        modules = [module_name(p) for p in pyfiles if not p.endswith("/__main__.py")]
        calls = [c for p in pyfiles for c in scan(current[p], p)]
    else:
        modules = [module_name(p) for p in changed]
        calls = [c for p in changed for c in rewritten(originals[p], current[p], p)]
    result = run_checks(target, s, modules, calls)
    who = f"{target.package} {target.version}"
    if not all_calls and not changed:
        text = f"{who} is not patched: nothing to verify (verify --all checks every call into vLLM)"
        return Outcome(text, {"ok": True, **result.data}, 0)
    text = "\n".join([*result.lines, f"verify {who}: " + (result.summary if result.ok else f"FAILED: {result.reason}")])
    return Outcome(text, {"ok": result.ok, **result.data}, 0 if result.ok else 1)


def audit(s: Settings) -> Outcome:
    """Every call into vLLM, bound as installed and after the rules; exit 1 if any stays broken."""
    from .audit import audit_plan, render
    from .calls import scan
    from .guard import binding_signatures
    from .plan import make_plan

    target, pack = load(s)
    guard, kind = signatures_for(s, target, pack)
    ov = open_overlay(s, target)
    originals = original_bytes(ov, target, target.python_files())
    plan = make_plan(target, pack, s.extra.get("vllm_version"), guard, kind, files=originals)
    callees = {c.callee for p, d in originals.items() for c in scan(d, p)}
    callees |= {c.callee for r in plan.changed for c in scan(r.after, r.path)}
    signatures, sig_kind, note = binding_signatures(s, target, callees)
    rows = audit_plan(plan, originals, signatures, note)
    installed = f"vLLM {target.vllm_version}" if target.vllm_version else "no installed vLLM"
    against = f"{installed}, rules for {plan.version} ({sig_kind or 'no'} signatures)"
    text, data = render(rows, f"{target.package} {target.version}", against, s.verbose > 0)
    if note:
        text = f"note: {note}\n{text}"
    data.update({"package": target.package, "version": target.version, "vllm": target.vllm_version,
                 "rules_for": str(plan.version), "signatures": sig_kind})
    return Outcome(text, data, 1 if data["summary"]["remaining"] else 0)

"""The overlay's view of the installed package: its original and how it got there.

The baseline checked against RECORD, drift after a reinstall, hand edits kept in the history,
state.json rebuilt from git. Replaying the journal after a killed run is `recovery.py`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import __version__
from ..errors import DamagedOverlayError, OverlayError, TargetError
from ..fsutil import hash_file, linked_part, record_hash
from ..words import agree, listing, plural
from .layout import tracked_paths
from .pristine import NotFound

if TYPE_CHECKING:
    from ..settings import Log
    from ..target import Target
    from .layout import State
    from .pristine import Finder, Pristine
    from .repo import Overlay


def record_mismatches(target: Target, files: list[str]) -> list[str]:
    """Files whose bytes differ from the sha256 RECORD lists (pip never checks this; we do)."""
    hashes = {e.path: e.hash for e in target.record}
    return [p for p in files if hashes.get(p) and hash_file(target.location / p) != hashes[p]]


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


def package_of(trailers: dict[str, str]) -> tuple[str, str] | None:
    """(name, version) from a commit's `Vsp-Package: speculators 0.3.0` trailer."""
    name, _, version = trailers.get("package", "").rpartition(" ")
    return (name, version) if name and version else None


def sync_state(ov: Overlay, target: Target, files: list[str]) -> None:
    """Rebuild state.json from git alone: HEAD's files, package and trailers, and `original`."""
    head = ov.head_commit()
    if head is None:
        return
    original = ov.resolve("original")
    trailers = read_trailers(ov, head)
    if trailers.get("kind") == "rollback" and trailers.get("to"):
        # A rollback to an earlier patched state is that state: describe it by its own commit.
        trailers = {**read_trailers(ov, trailers["to"]), "restored_by": head}
    when = ov.git("log", "-1", "--format=%cI", head).strip()
    # What HEAD records, not what is installed now: the two differ exactly when there is drift.
    head_files = sorted(p for p in ov.git("ls-tree", "-r", "-z", "--name-only", head).split("\0") if p)
    package = package_of(trailers) or (target.package, target.version)

    def hashes(commit: str) -> dict[str, str | None]:
        return {p: (record_hash(d) if d is not None else None) for p, d in ov.tree_files(commit, head_files).items()}

    local = local_commit(ov, original)
    ov.save_state(
        **({"local_commit": local, "local": hashes(local),
            "local_files": read_trailers(ov, local).get("files", "").split(",")} if local else {}),
        files=head_files,
        head=hashes(head),
        original=hashes(original),
        head_commit=head,
        original_commit=original,
        trailers=trailers,
        when=when,
        package=package[0],
        version=package[1],
        location=str(target.location),
    )


def local_commit(ov: Overlay, original: str) -> str | None:
    """The `local` commit (hand edits made before the tool first recorded the package) while it
    sits right on the current `original`: a reinstall since (a new original) leaves it history."""
    local = ov.tag_points_at("local")
    if local is None:
        return None
    try:
        parent = ov.git("rev-parse", "--verify", "-q", f"{local}^").strip()
    except OverlayError:
        return None
    return local if parent == original and read_trailers(ov, local).get("kind") == "local" else None


def refuse_links(target: Target, files: list[str]) -> None:
    """A linked install (a file or folder of the package is a symbolic link) cannot be recorded:
    refused before the overlay records anything."""
    for path in files:
        link = linked_part(target.location, path)
        if link is not None:
            raise TargetError(
                f"{link} is a symbolic link (a linked install?): reinstall {target.package} with copied files "
                f"(e.g. uv --link-mode=copy) to patch it; nothing was changed"
            )


def fresh_state(ov: Overlay, target: Target, files: list[str]) -> State:
    """state.json rebuilt from git (it is a cache for `status`: an apply or a rollback trusts git only)."""
    sync_state(ov, target, files)
    state = ov.state()
    if state is None:
        raise DamagedOverlayError(f"the overlay {ov.path} has a git repository without a commit: move it away "
                                  f"(mv {ov.path} {ov.path}.damaged) and run again")
    return state


def another_release(state: State, target: Target) -> str | None:
    """'speculators 0.4.0' when the overlay's HEAD records another release than the one installed."""
    recorded = (state.data.get("package"), state.data.get("version"))
    return None if recorded == (target.package, target.version) else " ".join(map(str, recorded))


def refuse_foreign_edits(target: Target, recorded: str, mismatched: list[str], rollback: bool) -> None:
    """Files of a release the overlay never recorded differ from its RECORD: there is no original of
    theirs to restore or to graft onto, so nothing is written."""
    who = f"{target.package} {target.version}"
    count = len(mismatched)
    fix = (f"reinstall it (pip install --force-reinstall --no-deps {target.package}=={target.version}) and run "
           f"again; rollback never writes another release's files" if rollback
           else f"run again with --accept-modified to take them as the original, or reinstall with pip install "
                f"--force-reinstall --no-deps {target.package}=={target.version}")
    raise OverlayError(
        f"{who} is installed where the overlay recorded {recorded}, and {plural(count, 'file')} of {who} "
        f"{agree(count, 'differs', 'differ')} from its RECORD: {listing(mismatched)}; the overlay holds no "
        f"original of {who}, so nothing was written: {fix}"
    )


def prepare(ov: Overlay, target: Target, accept_modified: bool, log: Log, pristine: Finder | None = None) -> list[str]:
    """Make sure the overlay's HEAD is what is installed: create it, or start a new baseline on drift.

    `pristine`: on a first record with files edited by hand, where to look for their RECORD-exact
    bytes; found, they are the original and the edits a `local` commit on top of it."""
    files = tracked_paths(e.path for e in target.record)
    refuse_links(target, files)
    current = {p: hash_file(target.location / p) for p in files}
    who = f"{target.package} {target.version}"
    state = None
    if ov.exists():
        state = fresh_state(ov, target, files)
        if state.files == files and all(current[p] == state.head.get(p) for p in files) \
                and another_release(state, target) is None:
            return files
    # A new original is about to be recorded: it must be what pip installed, unless the user says so.
    mismatched = record_mismatches(target, files)
    verified = ("RECORD verified" if not mismatched
                else f"accepted as modified: {plural(len(mismatched), 'file')} "
                     f"{agree(len(mismatched), 'differs', 'differ')} from RECORD")
    trailers = {"Package": who, "Record": "verified" if not mismatched else "modified: " + ",".join(mismatched)}
    if state is None:
        _record_first(ov, target, files, mismatched, accept_modified, log, pristine, verified, trailers)
        return files
    changed = sorted(p for p in {*files, *state.files} if current.get(p) != state.head.get(p))
    recorded = another_release(state, target)
    if recorded is not None and mismatched and not accept_modified:
        refuse_foreign_edits(target, recorded, mismatched, rollback=False)
    if not mismatched or recorded is not None:
        # Every installed file is what pip wrote (a reinstall under us), or another release whose edits
        # the user accepts: its files as they are are its original. Never grafted onto another release's.
        reason = (f"{target.package} changed from {state.data.get('version')} to {target.version}"
                  if recorded is not None
                  else f"{who} was reinstalled ({plural(len(changed), 'file')} changed, all match RECORD)")
        ov.commit(sorted({*files, *state.files}),
                  commit_message("baseline", f"original: {who} reinstalled ({verified})",
                                 [f"Drift: {reason}: {listing(changed)}"], trailers),
                  tag="original")
        sync_state(ov, target, files)
        log(f"{reason}: recorded the installed files as the new original; history kept")
        return files
    _accept_drift(ov, target, files, state, changed, mismatched, accept_modified, log, trailers)
    return files


def _record_first(ov: Overlay, target: Target, files: list[str], mismatched: list[str], accept_modified: bool,
                  log: Log, pristine: Finder | None, verified: str, trailers: dict[str, str]) -> None:
    """The first record of the installed package: its RECORD-exact original (the edits found a
    `local` commit on top of it where the pristine bytes are found), or a refusal."""
    who = f"{target.package} {target.version}"
    found = pristine(mismatched) if mismatched and pristine is not None else None
    if found is not None and not isinstance(found, NotFound):
        record_local(ov, target, files, mismatched, found, log)
        return
    # Without the pristine bytes, today's choice: refuse, or take the edited files as the original.
    searched = f"no pristine copy of {who} was found ({found.searched}); " if found is not None else ""
    if mismatched and not accept_modified:
        raise OverlayError(
            f"{plural(len(mismatched), 'file')} of {who} {agree(len(mismatched), 'differs', 'differ')} "
            f"from its RECORD (edited by hand already?): "
            f"{listing(mismatched)}; {searched}{'pass --wheel PATH with its wheel, ' if found else ''}"
            f"run again with --accept-modified to take them as the original, or "
            f"reinstall with pip install --force-reinstall --no-deps {target.package}=={target.version}"
        )
    if found is not None:
        log(f"{searched}taking the installed files as the original (--accept-modified)")
    ov.create(files, commit_message("baseline", f"original: {who} as installed ({verified})",
                                    [f"Location: {target.location}"], trailers))
    sync_state(ov, target, files)
    log(f"recorded the original {who} in the overlay {ov.path}")


def _accept_drift(ov: Overlay, target: Target, files: list[str], state: State, changed: list[str],
                  mismatched: list[str], accept_modified: bool, log: Log, trailers: dict[str, str]) -> None:
    """Files edited outside this tool since its last run, kept as part of a new original when the user
    says so (`--accept-modified`), history kept; refused otherwise."""
    who = f"{target.package} {target.version}"
    by_hand = [p for p in changed if p in mismatched] or changed
    if not accept_modified:
        raise OverlayError(
            f"{plural(len(by_hand), 'file')} of {who} changed outside this tool since its last run "
            f"(edited by hand?): {listing(by_hand)}; run rollback to restore the original, or run again "
            f"with --accept-modified to keep those edits as part of the original"
        )
    gone = [p for p in by_hand if not (target.location / p).exists()]
    if gone:
        raise OverlayError(
            f"{listing(gone)} {agree(len(gone), 'is', 'are')} missing from {who}: reinstall it with "
            f"pip install --force-reinstall --no-deps {target.package}=={target.version}"
        )
    ours = [p for p in by_hand if state.head.get(p) != state.original.get(p)]
    if ours:
        # The file holds our patch and the user's edit: as "original" it would carry our patch.
        raise OverlayError(
            f"{listing(ours)} {agree(len(ours), 'holds', 'hold')} this tool's patch and an edit made outside "
            f"it: run rollback first (it keeps the edit in the overlay's history), then edit again and "
            f"apply with --accept-modified"
        )
    verified = f"accepted as modified: {listing(by_hand)}"
    trailers["Record"] = "modified: " + ",".join(by_hand)
    # Keep the user's edits twice: as they are (history), and inside the new original.
    ov.commit(sorted({*files, *state.files}),
              commit_message("drift", f"edits made outside this tool to {who}", [f"Files: {listing(by_hand)}"],
                             {"Package": who}))
    edited = {p: (target.location / p).read_bytes() for p in by_hand}
    ov.commit_tree(ov.resolve("original"), edited,
                   commit_message("baseline", f"original: {who} with edits accepted", [verified], trailers),
                   tag="original")
    ov.reset_index()
    sync_state(ov, target, files)
    log(f"kept {plural(len(by_hand), 'file')} edited outside this tool as part of the original")


def record_local(ov: Overlay, target: Target, files: list[str], edited: list[str], found: Pristine,
                 log: Log) -> None:
    """The first record of a package edited by hand: `original` holds the pristine bytes (RECORD
    verified), `local` the files as installed on top of it, in one step (see `Overlay.create`)."""
    who = f"{target.package} {target.version}"
    n = len(edited)
    original = commit_message(
        "baseline", f"original: {who} as released (RECORD verified; {plural(n, 'hand-edited file')} from {found.source})",
        [f"Location: {target.location}",
         f"Pristine: {found.source}: the RECORD-exact bytes of {listing(edited, limit=len(edited))} (sha256 "
         f"checked against the installed RECORD); the installed {agree(n, 'file', 'files')} "
         f"{agree(n, 'is', 'are')} the next commit, 'local'"],
        {"Package": who, "Record": "verified", "Pristine": found.source})
    local = commit_message(
        "local", f"local: hand edits to {who}, not by this tool ({listing(edited)})",
        ["The user's own edits, found installed when this tool first recorded the package. The rules "
         "apply on top of them; `rollback` restores the pristine original, `rollback --to local` these edits.",
         *[f"  {p}" for p in edited]],
        {"Package": who, "Files": ",".join(edited)})
    ov.create(files, original, replace=found.files, local=local)
    sync_state(ov, target, files)
    log(f"{plural(n, 'file')} of {who} {agree(n, 'differs', 'differ')} from its RECORD (edited by hand): "
        f"{listing(edited)}; recorded the pristine original from {found.source} (sha256 checked against RECORD) "
        f"and the installed {agree(n, 'file', 'files')} as 'local' on top of it in the overlay {ov.path}")


def check_original(ov: Overlay, target: Target, commit: str, wanted: dict[str, bytes | None]) -> None:
    """Before rollback writes `original`: its bytes are RECORD's, except the files its own baseline
    commit says were accepted as modified (a moved tag or a planted commit is refused here)."""
    record = {e.path: e.hash for e in target.record if e.hash}
    accepted = set(read_trailers(ov, commit).get("record", "").removeprefix("modified: ").split(","))
    bad = sorted(p for p, data in wanted.items()
                 if p in record and p not in accepted and (data is None or record_hash(data) != record[p]))
    if bad:
        raise DamagedOverlayError(
            f"the overlay's original ({commit[:12]}) does not match {target.package} {target.version}'s RECORD: "
            f"{plural(len(bad), 'file')} {agree(len(bad), 'differs', 'differ')} ({listing(bad)}), so nothing was "
            f"written; the overlay was changed outside this tool: move it away (mv {ov.path} {ov.path}.damaged) "
            f"and reinstall with pip install --force-reinstall --no-deps {target.package}=={target.version}"
        )


def original_bytes(ov: Overlay | None, target: Target, paths: list[str]) -> dict[str, bytes]:
    """The bytes the rules plan from for `paths`: from disk where they match `original` (or the
    `local` hand edits on top of it), else from git: `local`'s where there is one, else `original`'s.

    So the rules never erase the user's edits (`local`), and a rollback to the pristine original
    is kept as chosen: the next apply patches what is installed. An install from a patched wheel
    (no overlay of its own) plans from the originals the wheel keeps."""
    state = ov.state() if ov is not None and ov.exists() else None
    if state is not None and (state.data.get("package"), state.data.get("version")) != (target.package,
                                                                                      target.version):
        state = None  # the overlay describes another install: this one's files are their own original
    if state is None:
        from ..fleet.installed import find

        wheel = find(target)
        if wheel is not None:
            # Installed from a patched wheel: its originals are the copies it keeps.
            kept = wheel.originals(target)
            out = {p: kept[p] for p in paths if p in kept}
            for path in paths:
                if path not in out and (target.location / path).is_file():
                    out[path] = (target.location / path).read_bytes()
            return out
    original = (state.original or state.head) if state else {}
    local: dict[str, str | None] = dict(state.data.get("local") or {}) if state else {}
    out = {}
    from_git = []
    for path in paths:
        try:
            data = (target.location / path).read_bytes()
        except FileNotFoundError:
            if state is not None and original.get(path):
                from_git.append(path)
            continue
        if state is None or record_hash(data) in {original.get(path), local.get(path, "")}:
            out[path] = data
        else:
            from_git.append(path)
    if from_git:
        assert ov is not None and state is not None
        commit = state.data.get("local_commit") or ov.resolve("original")
        for path, blob in ov.tree_files(commit, from_git).items():
            if blob is not None:
                out[path] = blob
    return out

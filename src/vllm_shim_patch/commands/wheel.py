"""`wheel [--vllm-version X] [-o DIR] [--all-series]`: the patched wheel, for the fleet.

From the patch applied here when the target is patched (its overlay's patched bytes, checked to
be what the rules plan now), else from a scratch copy of the release patched, verified and
rehearsed against the target's vLLM (the target is not changed). The building is `fleet/`'s;
this module picks the source of the bytes and gathers the facts the wheel states.
"""

from __future__ import annotations

import os
import tempfile
import zlib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import PatchError, TargetError, UsageError
from ..fsutil import hash_file
from ..report import wheel as text
from ..settings import ApplyOptions, WheelOptions
from .context import Context, Outcome

if TYPE_CHECKING:
    from packaging.version import Version

    from ..fleet.build import Built
    from ..overlay.pristine import OriginalWheel


class Refused(PatchError):
    """The wheel cannot be built from this target as it is (exit 1, one line)."""


@dataclass(frozen=True)
class Written:
    path: Path
    built: Built
    source: str  # where the patched bytes came from, in words
    original: str  # where the original wheel came from

    def as_dict(self) -> dict[str, Any]:
        p = self.built.provenance
        return {"file": str(self.path), "name": self.built.name, "sha256": self.built.sha256,
                "size": len(self.built.data), "version": p.version, "series": p.series,
                "requires": p.vllm_requirement, "built_for": p.built_for, "signatures": p.signatures,
                "rules": list(p.rules), "rules_digest": p.rules_digest, "files": sorted(p.files),
                "requirements": list(p.requirements), "verification": p.verification,
                "rehearsal": p.rehearsal.__dict__, "matrix": p.matrix, "from": self.source,
                "original": self.original, "zlib": zlib.ZLIB_RUNTIME_VERSION}


def output_folder(given: str | None, option: str = "-o") -> Path:
    """The folder the wheel goes to, created if need be, refused (exit 2) unless a file can be
    made in it: checked before anything else runs."""
    folder = Path(os.path.abspath(os.path.expanduser(given or ".")))
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".vsp-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise UsageError(f"{option} {given or '.'}: cannot write a file in {folder} "
                         f"({exc.strerror or exc}); nothing was written") from None
    return folder


def refuse_patched_wheel(ctx: Context, command: str) -> None:
    """A target installed from a patched wheel is no release to patch or build from."""
    from ..fleet.installed import find

    found = find(ctx.target)
    if found is not None:
        raise UsageError(text.refuse_patched_wheel(ctx.who, found, command))


def wheel(ctx: Context, opts: WheelOptions) -> Outcome:
    """Write the patched wheel for the series (--all-series: for every series the compatibility
    matrix rehearsed that can be built here); exit 0 written, 1 refused or left undone, 2 input."""
    from ..analysis.rehearse import model_request

    folder = output_folder(opts.out_dir)
    model_request(ctx.settings.model, ctx.settings.arch)  # one the rehearsal cannot build: exit 2 now
    if opts.all_series:
        return _all_series(ctx, opts, folder)
    if opts.vllm_sources:
        raise UsageError("--vllm-sources goes with --all-series (one series: --vllm-source)")
    ctx.load()
    refuse_patched_wheel(ctx, "wheel")
    try:
        original = _original(ctx, opts)
        done = write(ctx, original, folder, rehearse=not opts.no_rehearse, see_target=True)
    except Refused as exc:
        return Outcome(str(exc), {"ok": False, "error": str(exc), "kind": "Refused"}, 1)
    return Outcome(text.written(str(done.path), done.built, done.source), {"ok": True, "wheel": done.as_dict()}, 0,
                   notes=_notes(done.built))


def _notes(built: Built) -> tuple[str, ...]:
    return tuple(text.requirement_note(r["before"], r["after"], r["why"]) for r in built.provenance.requirements)


def _original(ctx: Context, opts: WheelOptions | ApplyOptions) -> OriginalWheel:
    from ..overlay.pristine import original_wheel

    return original_wheel(ctx.target, opts.wheel, not opts.no_index, ctx.log)


def write(ctx: Context, original: OriginalWheel, folder: Path, *, rehearse: bool, see_target: bool) -> Written:
    """Build (from the patch here, else a scratch copy) and write the wheel atomically."""
    from ..fleet import archive

    trailers = patched_here(ctx)
    if trailers is not None:
        built, source = build_here(ctx, trailers, original), "the patch applied here"
    else:
        built, source = _scratch(ctx, original, rehearse=rehearse, see_target=see_target)
    try:
        path = archive.write_atomic(folder, built.name, built.data)
    except OSError as exc:
        raise TargetError(f"cannot write {folder / built.name} ({exc.strerror or exc}); nothing was written") from None
    return Written(path, built, source, original.source)


def patched_here(ctx: Context) -> dict[str, str] | None:
    """The overlay commit's trailers when the target holds the patch of the release as published,
    as recorded (None: not patched here, so a scratch copy is patched instead). Drift is refused."""
    from ..overlay.layout import read_state

    target = ctx.target
    ov = ctx.overlay
    if not ov.exists():
        return None
    state = read_state(ov.path)
    if state is None or (state.data.get("package"), state.data.get("version")) != (target.package, target.version):
        return None
    trailers: dict[str, str] = dict(state.data.get("trailers") or {})
    files = ctx.tracked
    differs = ([p for p in files if hash_file(target.location / p) != state.head.get(p)]
               if state.files == files else files)
    if trailers.get("kind") != "patch":
        return None
    if not _same_series(trailers.get("vllm", "").split(" ")[0], ctx.check_version()):
        return None  # patched for another series than asked for now: a scratch copy is patched for this one
    if differs:
        raise Refused(text.drifted(ctx.who, differs))
    record = {e.path: e.hash for e in target.record if e.hash}
    if state.data.get("local_commit") or any(state.original.get(p) != h for p, h in record.items() if p in files):
        return None  # hand edits, or an original accepted as modified: the release as published is patched anew
    return trailers


def _same_series(recorded: str, now: Version) -> bool:
    """Whether the patch recorded for `recorded` may be the one for `now` (one series holds the
    other; `check` then says whether the rules plan the same bytes)."""
    from packaging.version import InvalidVersion, Version

    from ..versions import in_series

    try:
        then = Version(recorded)
    except InvalidVersion:
        return False
    return in_series(then, now) or in_series(now, then)


def build_here(ctx: Context, trailers: dict[str, str], original: OriginalWheel) -> Built:
    """The wheel of the patch the target holds, once `--check` says it is what the rules plan."""
    from ..fleet import build, facts, naming, rehearsed
    from ..fleet.digest import rules_digest
    from .check import check

    gate = check(ctx, ApplyOptions())
    if not gate.ok:
        raise Refused(f"{gate.text.splitlines()[-1]}; nothing was written")
    target, settings = ctx.target, ctx.settings
    _, kind = ctx.guard
    source = ctx.source_version
    built_for = "" if kind is None else (source[1] or "") if source else (target.vllm_version or "")
    version = str(ctx.check_version())
    series = naming.series_of(settings.vllm_version) if settings.vllm_version else \
        naming.major_minor(built_for or version)
    record = {e.path: e.hash for e in target.record if e.hash}
    changed = sorted(p for p in ctx.tracked if p in record and hash_file(target.location / p) != record[p])
    state = ctx.overlay.state()
    assert state is not None
    patched = {p: d for p, d in ctx.overlay.tree_files(state.data["head_commit"], changed).items() if d is not None}
    rules = [r for r in trailers.get("rules", "").split(",") if r]
    known = {r.id: r for r in ctx.full_pack.rules}
    requires, _ = facts.vllm_requires(target, settings.vllm_source)
    rehearsal = facts.rehearsal(trailers)

    def split(key: str) -> tuple[str, ...]:
        return tuple(n for n in trailers.get(key, "").split(",") if n)

    return build.build(original.files, patched, build.Facts(
        series=series, built_for=built_for, signatures=str(kind or "unguarded"), rules=tuple(rules),
        rules_digest=rules_digest(ctx.pack), verification=trailers.get("verify", ""), rehearsal=rehearsal,
        vllm_requires=requires, tool=f"vllm-shim-patch {_tool_version()}", skipped=split("skipped"),
        options=split("options"), matrix=rehearsed.record(target.version, built_for) if built_for else "",
        explain=facts.explainer(series, built_for, [known[r] for r in rules if r in known], target,
                                rehearsal.outcome == "passed")))


def _tool_version() -> str:
    from .. import __version__

    return __version__


def _scratch(ctx: Context, original: OriginalWheel, *, rehearse: bool, see_target: bool) -> tuple[Built, str]:
    """Apply in a scratch copy of the release (the target untouched), then build from it."""
    from ..fleet import scratch
    from .apply import apply

    target = ctx.target
    with_vllm = see_target and target.vllm_location is not None
    if rehearse and not with_vllm:
        raise UsageError(
            f"{ctx.who} is not patched here, and no rehearsal is possible (no vLLM installed in {target.python}): "
            f"apply the patch first (the wheel then carries its verdict), build where the target's vLLM is "
            f"installed, or pass --no-rehearse to build from a scratch copy verified without a rehearsal; "
            f"nothing was written")
    with tempfile.TemporaryDirectory(prefix="vsp-wheel-") as tmp:
        see = scratch.site_dirs(target.python) if with_vllm else []
        against = (f"with the target's vLLM {target.vllm_version}" if with_vllm
                   else f"against the vLLM source {ctx.settings.vllm_source}" if ctx.settings.vllm_source
                   else "without vLLM")
        ctx.log(f"{ctx.who} is not patched here: patching a scratch copy of the release ({original.source}) "
                f"{against}; the target is not changed")
        python = scratch.make(target.python, Path(tmp), original.files, see=see)
        inner = Context(replace(ctx.settings, python=python, state_dir=str(Path(tmp) / "state")), log=ctx.log)
        # Without a vLLM in the copy nothing is rehearsed, and the verdict says so (not: --no-rehearse).
        outcome = apply(inner, ApplyOptions(no_rehearse=not rehearse and with_vllm, no_index=True))
        if not outcome.ok:
            raise Refused(f"the patch did not pass in a scratch copy of {ctx.who}: {outcome.text.splitlines()[-1]}; "
                          f"nothing was written")
        trailers = patched_here(inner)
        if trailers is None:
            raise Refused(f"the scratch copy of {ctx.who} holds no patch after apply: {outcome.text}")
        how = "a scratch copy patched, verified and rehearsed here" if rehearse and with_vllm else \
            "a scratch copy patched and verified here (not rehearsed)"
        return build_here(inner, trailers, original), how


def _sources(folder: str) -> dict[str, str]:
    """The vLLM sources in `folder` (source folders or wheels), by the version each carries."""
    from ..versions import source_version

    root = Path(folder)
    if not root.is_dir():
        raise UsageError(f"--vllm-sources {folder}: not a folder (give one holding a vLLM source folder or "
                         f"wheel per release)")
    found: dict[str, str] = {}
    for entry in sorted(root.iterdir()):
        version = source_version(entry) if entry.is_dir() or entry.suffix == ".whl" else None
        if version is not None:
            found.setdefault(version, str(entry))
    return found


def _all_series(ctx: Context, opts: WheelOptions, folder: Path) -> Outcome:
    """One wheel per series the matrix rehearsed the installed release on: the target's own
    series with its vLLM (rehearsed), each other from its source in --vllm-sources (verified)."""
    from ..fleet import archive, naming, rehearsed
    from ..versions import in_series, parse_version

    if ctx.settings.vllm_version or ctx.settings.vllm_source:
        raise UsageError("--all-series picks each series itself: leave out --vllm-version and --vllm-source "
                         "(the sources go in --vllm-sources DIR)")
    if not opts.vllm_sources:
        raise UsageError("--all-series needs --vllm-sources DIR: a folder with one vLLM source folder or wheel per "
                         "release to build for (the installed vLLM's own series needs none)")
    sources = _sources(opts.vllm_sources)
    ctx.check_package()  # each series' own context loads the rest
    refuse_patched_wheel(ctx, "wheel")
    target = ctx.target
    releases = rehearsed.releases(target.version)
    if not releases:
        raise UsageError(f"the compatibility matrix rehearsed no vLLM release with {ctx.who}")
    original = _original(ctx, opts)
    done: list[Written] = []
    missing: list[tuple[str, str]] = []
    for release in releases:
        series = naming.major_minor(release)
        wanted = parse_version(series, "series")
        try:
            if target.vllm_version and in_series(parse_version(target.vllm_version, "vLLM"), wanted):
                sub = Context(replace(ctx.settings, vllm_version=series), log=ctx.log)
                done.append(write(sub, original, folder, rehearse=not opts.no_rehearse, see_target=True))
                continue
            here = sorted((v for v in sources if in_series(parse_version(v, "vLLM source"), wanted)),
                          key=lambda v: (v != release, v))
            if not here:
                missing.append((series, f"no vLLM {series}.x source in {opts.vllm_sources}"))
                continue
            sub = Context(replace(ctx.settings, vllm_version=series, vllm_source=sources[here[0]]), log=ctx.log)
            built, how = _scratch(sub, original, rehearse=False, see_target=False)
            done.append(Written(archive.write_atomic(folder, built.name, built.data), built, how, original.source))
        except PatchError as exc:
            missing.append((series, str(exc)))
    for w in done:
        ctx.log(text.written(str(w.path), w.built, w.source))
    lines = [text.not_built(s, why) for s, why in missing] + [text.all_series(len(done), len(missing))]
    return Outcome("\n".join(lines), {"ok": not missing, "wheels": [w.as_dict() for w in done],
                                      "not_built": [{"series": s, "why": why} for s, why in missing]},
                   0 if not missing else 1)


def apply_and_write(ctx: Context, opts: ApplyOptions) -> Outcome:
    """`apply --wheel-out DIR`: the folder and the original wheel checked first, then apply; after
    a passing apply (exit 0), the wheel of the patch it committed (its file and sha256 in the JSON)."""
    from .apply import apply

    assert opts.wheel_out is not None
    folder = output_folder(opts.wheel_out, "--wheel-out")
    ctx.load()
    refuse_patched_wheel(ctx, "apply")
    original = _original(ctx, opts)
    outcome = apply(ctx, replace(opts, wheel_out=None))
    if not outcome.ok:
        note = "no wheel written: apply did not pass"
        return replace(outcome, data={**outcome.data, "wheel": None}, notes=(*outcome.notes, note))
    try:
        trailers = patched_here(ctx)
        if trailers is None:
            raise Refused(f"{ctx.who} holds no recorded patch after apply: no wheel written")
        done = write(ctx, original, folder, rehearse=False, see_target=False)
    except Refused as exc:
        return replace(outcome, data={**outcome.data, "wheel": None, "error": str(exc)}, exit_code=1,
                       notes=(*outcome.notes, str(exc)))
    for note in (text.written(str(done.path), done.built, done.source), *_notes(done.built)):
        ctx.log(note)
    return replace(outcome, data={**outcome.data, "wheel": done.as_dict()})

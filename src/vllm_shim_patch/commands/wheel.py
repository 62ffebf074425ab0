"""`wheel [--vllm-version X] [-o DIR] [--all-series]`: the patched wheel, for the fleet.

From the patch applied here when the target is patched (its overlay's patched bytes, checked to
be what the rules plan now), else from a scratch copy of the release patched, verified and
rehearsed against the target's vLLM (the target is not changed) by the apply transaction
(`patch.py`). The building is `fleet/`'s, the wheel of the patch here `patched_wheel.py`'s; this
module picks the source of the bytes.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import PatchError, Refused, UsageError
from ..interrupts import temp_dir
from ..report import wheel as text
from ..options import WheelOptions
from ..settings import ApplyOptions
from . import preflight
from .context import Context, Outcome
from .patched_wheel import Written, build_here, find_original, notes, output_folder, patched_here, save

if TYPE_CHECKING:
    from ..fleet.build import Built
    from ..overlay.pristine import OriginalWheel


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
    preflight.refuse_patched_wheel(ctx.target, "wheel")
    if not opts.no_rehearse:
        from ..analysis.rehearse import topology

        # A size this machine cannot rehearse: exit 2 before anything is built.
        topology(ctx.settings.tensor_parallel_size, ctx.settings.pipeline_parallel_size,
                 model_request(ctx.settings.model, ctx.settings.arch), ctx.target)
    try:
        original = find_original(ctx, opts)
        done = write(ctx, original, folder, rehearse=not opts.no_rehearse, see_target=True)
    except Refused as exc:
        return Outcome(str(exc), {"ok": False, "error": str(exc), "kind": type(exc).__name__}, 1)
    return Outcome(text.written(str(done.path), done.built, done.source), {"ok": True, "wheel": done.as_dict()}, 0,
                   notes=notes(done.built))


def write(ctx: Context, original: OriginalWheel, folder: Path, *, rehearse: bool, see_target: bool) -> Written:
    """Build (from the patch here, else a scratch copy) and write the wheel atomically."""
    trailers = patched_here(ctx)
    if trailers is not None:
        built, source = build_here(ctx, trailers, original), "the patch applied here"
    else:
        built, source = _scratch(ctx, original, rehearse=rehearse, see_target=see_target)
    return save(folder, built, source, original)


def _scratch(ctx: Context, original: OriginalWheel, *, rehearse: bool, see_target: bool) -> tuple[Built, str]:
    """Apply in a scratch copy of the release (the target untouched), then build from it."""
    from ..fleet import scratch
    from .patch import patch

    target = ctx.target
    with_vllm = see_target and target.vllm_location is not None
    if rehearse and not with_vllm:
        raise UsageError(
            f"{ctx.who} is not patched here, and no rehearsal is possible (no vLLM installed in {target.python}): "
            f"apply the patch first (the wheel then carries its verdict), build where the target's vLLM is "
            f"installed, or pass --no-rehearse to build from a scratch copy verified without a rehearsal; "
            f"nothing was written")
    with temp_dir("vsp-wheel-") as tmp:
        see = scratch.site_dirs(target.python) if with_vllm else []
        against = (f"with the target's vLLM {target.vllm_version}" if with_vllm
                   else f"against the vLLM source {ctx.settings.vllm_source}" if ctx.settings.vllm_source
                   else "without vLLM")
        ctx.log(f"{ctx.who} is not patched here: patching a scratch copy of the release ({original.source}) "
                f"{against}; the target is not changed")
        python = scratch.make(target.python, Path(tmp), original.files, see=see)
        inner = Context(replace(ctx.settings, python=python, state_dir=str(Path(tmp) / "state")), log=ctx.log)
        # Without a vLLM in the copy nothing is rehearsed, and the verdict says so (not: --no-rehearse).
        patched = patch(inner, ApplyOptions(no_rehearse=not rehearse and with_vllm, no_index=True))
        outcome = patched.outcome
        if not outcome.ok:
            raise Refused(f"the patch did not pass in a scratch copy of {ctx.who}: {outcome.text.splitlines()[-1]}; "
                          f"nothing was written")
        trailers = patched_here(inner)
        if trailers is None:
            raise Refused(f"the scratch copy of {ctx.who} holds no patch after apply: {outcome.text}")
        how = "a scratch copy patched, verified and rehearsed here" if rehearse and with_vllm else \
            "a scratch copy patched and verified here (not rehearsed)"
        return build_here(inner, trailers, original, patched.plan), how


def _sources(folder: str) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """The vLLM sources in `folder` (source folders or wheels), by the version each carries; and
    the ones whose version is no version (`../../../etc`), each with why: left out and named, so
    one bad source costs its own series at most, never every series."""
    from packaging.version import InvalidVersion, Version

    from ..versions import source_version

    root = Path(folder)
    if not root.is_dir():
        raise UsageError(f"--vllm-sources {folder}: not a folder (give one holding a vLLM source folder or "
                         f"wheel per release)")
    found: dict[str, str] = {}
    ignored: list[tuple[str, str]] = []
    for entry in sorted(root.iterdir()):
        version = source_version(entry) if entry.is_dir() or entry.suffix == ".whl" else None
        if version is None:
            continue
        try:
            Version(version)
        except InvalidVersion:
            ignored.append((str(entry), f"the version it carries, {version!r}, is not a version"))
            continue
        found.setdefault(version, str(entry))
    return found, ignored


def _all_series(ctx: Context, opts: WheelOptions, folder: Path) -> Outcome:
    """One wheel per series the matrix rehearsed the installed release on: the target's own
    series with its vLLM (rehearsed), each other from its source in --vllm-sources (verified)."""
    from ..fleet import naming, rehearsed
    from ..versions import in_series, parse_version

    if ctx.settings.vllm_version or ctx.settings.vllm_source:
        raise UsageError("--all-series picks each series itself: leave out --vllm-version and --vllm-source "
                         "(the sources go in --vllm-sources DIR)")
    if not opts.vllm_sources:
        raise UsageError("--all-series needs --vllm-sources DIR: a folder with one vLLM source folder or wheel per "
                         "release to build for (the installed vLLM's own series needs none)")
    sources, ignored = _sources(opts.vllm_sources)
    ctx.start_probe()
    preflight.check_package(ctx.settings.package, ctx.rules.pack)  # each series' own context loads the rest
    preflight.refuse_patched_wheel(ctx.target, "wheel")
    target = ctx.target
    releases = rehearsed.releases(target.version)
    if not releases:
        raise UsageError(f"the compatibility matrix rehearsed no vLLM release with {ctx.who}")
    original = find_original(ctx, opts)
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
            done.append(save(folder, built, how, original))
        except PatchError as exc:
            missing.append((series, str(exc)))
    for w in done:
        ctx.log(text.written(str(w.path), w.built, w.source))
    lines = ([text.source_ignored(p, why) for p, why in ignored] + [text.not_built(s, why) for s, why in missing]
             + [text.all_series(len(done), len(missing))])
    return Outcome("\n".join(lines), {"ok": not missing, "wheels": [w.as_dict() for w in done],
                                      "not_built": [{"series": s, "why": why} for s, why in missing],
                                      "sources_ignored": [{"path": p, "why": why} for p, why in ignored]},
                   0 if not missing else 1)

"""The patched wheel of the patch a target holds: the folder it goes to, whether the target holds
the patch of the release as published (`patched_here`), the wheel built from it (`build_here`)
and written atomically (`save`), and what `apply --wheel-out` does around the apply transaction
(`prepare_out` before it, `write_out` from the plan it wrote).

A step the commands share (`wheel`, `apply --wheel-out`), below them: it runs no command.
"""

from __future__ import annotations

import os
import tempfile
import zlib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import Refused, TargetError, UsageError
from ..fsutil import hash_file
from ..report import wheel as text
from ..options import WheelOptions
from ..settings import ApplyOptions
from . import preflight
from .context import Context, Outcome

if TYPE_CHECKING:
    from packaging.version import Version

    from ..fleet.build import Built
    from ..overlay.pristine import OriginalWheel
    from ..rewrite.plan import Plan


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


def notes(built: Built) -> tuple[str, ...]:
    """A line for each requirement the wheel rewrote (before, after, why)."""
    return tuple(text.requirement_note(r["before"], r["after"], r["why"]) for r in built.provenance.requirements)


def find_original(ctx: Context, opts: WheelOptions | ApplyOptions) -> OriginalWheel:
    """The installed release's original wheel (--wheel, else the installed-from file, the pip and
    uv caches, the index unless --no-index)."""
    from ..overlay.pristine import original_wheel

    return original_wheel(ctx.target, opts.wheel, not opts.no_index, ctx.log)


def save(folder: Path, built: Built, source: str, original: OriginalWheel) -> Written:
    """Write `built` into `folder` atomically (a temporary name, then renamed)."""
    from ..fleet import archive

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
    ov = ctx.files.overlay
    if not ov.exists():
        return None
    state = read_state(ov.path)
    if state is None or (state.data.get("package"), state.data.get("version")) != (target.package, target.version):
        return None
    trailers: dict[str, str] = dict(state.data.get("trailers") or {})
    files = ctx.files.tracked
    differs = ([p for p in files if hash_file(target.location / p) != state.head.get(p)]
               if state.files == files else files)
    if trailers.get("kind") != "patch":
        return None
    if not same_series(trailers.get("vllm", "").split(" ")[0], _version(ctx)):
        return None  # patched for another series than asked for now: a scratch copy is patched for this one
    asked = ctx.settings.tensor_parallel_size
    if asked is not None and not trailers.get("rehearsal-topology", "").startswith(f"tensor parallel size {asked},"):
        return None  # rehearsed at another size than asked for now: a scratch copy is rehearsed at this one
    if differs:
        raise Refused(text.drifted(ctx.who, differs))
    record = {e.path: e.hash for e in target.record if e.hash}
    if state.data.get("local_commit") or any(state.original.get(p) != h for p, h in record.items() if p in files):
        return None  # hand edits, or an original accepted as modified: the release as published is patched anew
    return trailers


def _series(ctx: Context) -> str:
    """The vLLM series the wheel is for: --vllm-version's, else that of the vLLM the guards read."""
    from ..fleet import naming

    _, kind = ctx.vllm.guard
    source = ctx.vllm.source_version
    built_for = "" if kind is None else (source[1] or "") if source else (ctx.target.vllm_version or "")
    if ctx.settings.vllm_version:
        return naming.series_of(ctx.settings.vllm_version)
    return naming.major_minor(built_for or str(_version(ctx)))


def check_slot(ctx: Context, folder: Path, original: OriginalWheel, option: str, given: str | None) -> None:
    """Refuse (exit 2, before anything is written) an output folder where the wheel's name is taken
    by a folder: the wheel could not be renamed into place after the patch was written."""
    from ..fleet import naming
    from ..fleet.build import Original

    o = Original.read(original.files)
    version = naming.local_version(o.release, _series(ctx), tuple(ctx.rules.skipped),
                                   tuple(sorted(ctx.settings.rule_options)))
    path = folder / naming.wheel_file_name(o.name, version, o.tags)
    if path.is_dir() and not path.is_symlink():
        raise UsageError(f"{option} {given or '.'}: {path} is a folder, where the wheel would be written: move "
                         f"it away and run again; nothing was written")


def _version(ctx: Context) -> Version:
    """The vLLM version the rules are for in this run (a contradiction refused, exit 2)."""
    return preflight.check_version(ctx.settings.vllm_version, ctx.target, ctx.vllm.source_version)


def same_series(recorded: str, now: Version) -> bool:
    """Whether the patch recorded for `recorded` may be the one for `now` (one series holds the
    other; `check` then says whether the rules plan the same bytes)."""
    from packaging.version import InvalidVersion, Version

    from ..versions import in_series

    try:
        then = Version(recorded)
    except InvalidVersion:
        return False
    return in_series(then, now) or in_series(now, then)


def build_here(ctx: Context, trailers: dict[str, str], original: OriginalWheel, plan: Plan | None = None) -> Built:
    """The wheel of the patch the target holds, once `--check`'s body says it is what the rules
    plan (`plan`: the one this run's apply wrote, else planned now). The wheel's METADATA records
    the rehearsal as it was (or that it was not run): the gate asks no rehearsal of its own."""
    from ..fleet import build, facts, rehearsed
    from ..fleet.digest import rules_digest
    from .planned import check_plan

    gate = check_plan(ctx, plan)
    if not gate.ok:
        raise Refused(f"{gate.text.splitlines()[-1]}; nothing was written")
    target, settings = ctx.target, ctx.settings
    _, kind = ctx.vllm.guard
    source = ctx.vllm.source_version
    built_for = "" if kind is None else (source[1] or "") if source else (target.vllm_version or "")
    series = _series(ctx)
    record = {e.path: e.hash for e in target.record if e.hash}
    ov = ctx.files.overlay
    changed = sorted(p for p in ctx.files.tracked if p in record and hash_file(target.location / p) != record[p])
    state = ov.state()
    assert state is not None
    patched = {p: d for p, d in ov.tree_files(state.data["head_commit"], changed).items() if d is not None}
    rules = [r for r in trailers.get("rules", "").split(",") if r]
    known = {r.id: r for r in ctx.rules.full.rules}
    requires, _ = facts.vllm_requires(target, settings.vllm_source)
    rehearsal = facts.rehearsal(trailers)

    def split(key: str) -> tuple[str, ...]:
        return tuple(n for n in trailers.get(key, "").split(",") if n)

    return build.build(original.files, patched, build.Facts(
        series=series, built_for=built_for, signatures=str(kind or "unguarded"), rules=tuple(rules),
        rules_digest=rules_digest(ctx.rules.pack), verification=trailers.get("verify", ""), rehearsal=rehearsal,
        vllm_requires=requires, tool=f"vllm-shim-patch {_tool_version()}", skipped=split("skipped"),
        options=split("options"), matrix=rehearsed.record(target.version, built_for) if built_for else "",
        explain=facts.explainer(series, built_for, [known[r] for r in rules if r in known], target,
                                rehearsal.outcome == "passed")))


def _tool_version() -> str:
    from .. import __version__

    return __version__


@dataclass(frozen=True)
class WheelOut:
    """`apply --wheel-out DIR`'s inputs, checked before apply writes anything."""

    folder: Path
    original: OriginalWheel


def prepare_out(ctx: Context, opts: ApplyOptions) -> WheelOut:
    """The folder (writable) and the original wheel (found), else exit 2 before anything is written."""
    assert opts.wheel_out is not None
    folder = output_folder(opts.wheel_out, "--wheel-out")
    ctx.load()
    preflight.refuse_patched_wheel(ctx.target, "apply")
    original = find_original(ctx, opts)
    check_slot(ctx, folder, original, "--wheel-out", opts.wheel_out)
    return WheelOut(folder, original)


def write_out(ctx: Context, out: WheelOut, outcome: Outcome, plan: Plan | None) -> Outcome:
    """After a passing apply (exit 0, `outcome`), the wheel of the patch it committed (its file and
    sha256 in the JSON), from `plan`, the plan it wrote (None: planned again); after any other,
    `outcome` saying that no wheel was written."""
    if not outcome.ok:
        note = "no wheel written: apply did not pass"
        return replace(outcome, data={**outcome.data, "wheel": None}, notes=(*outcome.notes, note))
    try:
        trailers = patched_here(ctx)
        if trailers is None:
            raise Refused(f"{ctx.who} holds no recorded patch after apply: no wheel written")
        built = build_here(ctx, trailers, out.original, plan)
        done = save(out.folder, built, "the patch applied here", out.original)
    except (Refused, TargetError) as exc:
        # The patch is written and recorded by now: the line says so, never "nothing was written".
        why = str(exc).removesuffix("; nothing was written").removesuffix(": no wheel written")
        line = f"no wheel written: {why}; the patch itself is applied and recorded ({ctx.who})"
        return replace(outcome, data={**outcome.data, "wheel": None, "error": line}, exit_code=1,
                       notes=(*outcome.notes, line))
    for note in (text.written(str(done.path), done.built, done.source), *notes(done.built)):
        ctx.log(note)
    return replace(outcome, data={**outcome.data, "wheel": done.as_dict()})

"""`--check`, `status` and `rollback` on an installation from a patched wheel (no overlay there:
the wheel's RECORD, its `vsp/patch.json` and the originals it keeps say everything)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import TargetError, UsageError
from ..interrupts import temp_dir
from ..kinds import PackageState
from ..report import wheel as text
from ..options import RollbackOptions
from .context import Context, Outcome

if TYPE_CHECKING:
    from ..fleet.installed import InstalledWheel


def describe(wheel: InstalledWheel) -> dict[str, Any]:
    p = wheel.provenance
    return {"version": p.version, "release": p.release, "series": p.series, "requires": p.vllm_requirement,
            "built_for": p.built_for, "signatures": p.signatures, "rules": list(p.rules),
            "rules_digest": p.rules_digest, "files": sorted(p.files), "verification": p.verification,
            "rehearsal": p.rehearsal.__dict__, "tool": p.tool}


def check(ctx: Context, wheel: InstalledWheel, replan: Callable[[], Outcome]) -> Outcome:
    """Exit 0 when the files are the wheel's (RECORD), every vLLM named (--vllm-version, the
    installed one, --vllm-source) is in its series, and, where a vLLM is at hand to guard by, the
    rules plan the installed bytes from the originals the wheel keeps (`replan`: the plain check,
    which plans from them); else 1, naming why."""
    target, who = ctx.target, ctx.who
    data: dict[str, Any] = {"ok": False, "wheel": describe(wheel), "vllm": None, "drift": [], "replanned": False}
    drift = wheel.drift(target)
    if drift:
        return Outcome(text.wheel_drifted(who, wheel, drift), {**data, "drift": drift}, 1)
    source = ctx.vllm.source_version[1] if ctx.vllm.source_version else None
    named = [("--vllm-version", ctx.settings.vllm_version), ("the installed vLLM", target.vllm_version),
             ("the vLLM source given (--vllm-source)", source)]
    for what, version in named:
        if version is not None and not wheel.holds(version):
            return Outcome(text.check_other_series(who, wheel, version, what), {**data, "vllm": version}, 1)
    vllm = target.vllm_version or source or ctx.settings.vllm_version
    data["vllm"] = vllm
    if target.vllm_location is None and not ctx.settings.vllm_source:
        return Outcome(text.check_patched(who, wheel, vllm, None), {**data, "ok": True}, 0)
    # A vLLM to guard by: the rules, from the wheel's originals, must plan what is installed.
    planned = replan()
    data = {**planned.data, **data, "replanned": True, "ok": planned.ok}
    if not planned.ok:
        # The plain check's own advice (run apply) is refused on this box: its reason alone.
        reason = planned.text.splitlines()[-1].split("; run patch-speculators")[0]
        return Outcome(text.check_replanned(who, wheel, str(vllm), reason), data, 1)
    against = (f"the installed vLLM {target.vllm_version}" if target.vllm_location is not None
               else f"the vLLM source {ctx.settings.vllm_source} ({source})")
    return Outcome(text.check_patched(who, wheel, vllm, against), data, 0)


def status(ctx: Context, wheel: InstalledWheel, base: dict[str, Any]) -> Outcome:
    drift = wheel.drift(ctx.target)
    data = {**base, "wheel": describe(wheel), "files": drift}
    if drift:
        return Outcome(text.status_drifted(ctx.who, wheel, drift), {**data, "state": PackageState.DRIFTED.value})
    return Outcome(text.status_patched(ctx.who, wheel), {**data, "state": PackageState.PATCHED.value})


def rollback(ctx: Context, opts: RollbackOptions, wheel: InstalledWheel) -> Outcome:
    """Reinstall the release as published, from the original wheel rebuilt out of the originals the
    patched wheel keeps and the files it left as released (each checked against the original
    RECORD); where that cannot be done, exit 1 with the pip command that does it."""
    from ..fleet import scratch
    from ..fleet.record import mismatches, read
    from ..target import probe

    if opts.to is not None:
        raise UsageError(f"--to {opts.to}: {ctx.who} was installed from a patched wheel, which has no overlay "
                         f"states; rollback reinstalls {wheel.provenance.package} {wheel.provenance.release}")
    p = wheel.provenance
    data: dict[str, Any] = {"changed": False, "to": f"{p.package}=={p.release}", "wheel": describe(wheel)}
    drift = wheel.drift(ctx.target)
    if drift:
        # On an overlay install the edits are kept as `local`; here nothing could keep them.
        return Outcome(text.rollback_drifted(ctx.who, wheel, drift), {**data, "drift": drift}, 1)
    try:
        files = wheel.original_files(ctx.target)
        with temp_dir("vsp-rollback-") as tmp:
            path, requirement = scratch.write_original(files, Path(tmp))
            try:
                scratch.pip_install(ctx.target.python, path.parent, requirement, force=True)
            except TargetError as exc:
                # pip may have written part of it (the release installed, its `~name` stash left):
                # what is there now is said, never "nothing was written".
                why = str(exc).removesuffix("; nothing was written")
                now = probe(ctx.settings.python, ctx.settings.package)
                stash = sorted(e.name for e in now.location.iterdir() if e.name.startswith("~"))
                data.update(installed=f"{now.package} {now.version}", left_by_pip=stash)
                return Outcome(text.rollback_pip_failed(ctx.who, wheel, why, now.version, str(now.location), stash),
                               data, 1)
    except TargetError as exc:
        return Outcome(text.rollback_by_hand(ctx.who, wheel, str(exc)), data, 1)
    after = probe(ctx.settings.python, ctx.settings.package)
    rows = read(files[f"{p.original_dist_info}/RECORD"])
    bad = mismatches(after.location, rows) if after.version == p.release else ["(another version installed)"]
    data.update(changed=True, record_mismatch=bad, installed=f"{after.package} {after.version}")
    if bad:
        return Outcome(text.rollback_by_hand(ctx.who, wheel, f"after the reinstall, {', '.join(bad)} differ"), data, 1)
    return Outcome(text.rolled_back(ctx.who, wheel, len([r for r in rows if r.hash])), data, 0)

"""`--check`: exit 1 unless the package is in the patched state for this vLLM (Dockerfiles, CI)."""

from __future__ import annotations

import dataclasses

from ..report import check as text
from ..settings import ApplyOptions
from . import preflight
from .context import Context, Outcome
from .planned import check_plan


def check(ctx: Context, opts: ApplyOptions) -> Outcome:
    """Exit 1 when a file would change, or a site is left for a human (`apply --check`), or when what
    runs is not the patched source (a shadow copy, missing sources, unlisted files, stale bytecode).
    An install from a patched wheel is checked against that wheel (`installed.check`)."""
    from ..fleet.installed import find

    ctx.start_probe()
    # A package no rule is for: refused before the target's answer, as always.
    preflight.check_package(ctx.settings.package, ctx.rules.pack)
    wheel = find(ctx.target)
    if wheel is not None:
        from .installed import check as check_wheel

        return check_wheel(ctx, wheel, lambda: check_plan(ctx))
    planned = check_plan(ctx)
    return _rehearsed(ctx, opts, planned) if planned.ok else planned


def _rehearsed(ctx: Context, opts: ApplyOptions, planned: Outcome) -> Outcome:
    """`planned` (the bytes are the patch), unless vLLM is installed and the overlay records no
    passing rehearsal of these bytes: "patched" means it ran, since a patch whose rehearsal could
    not run (or was turned off) may still fail on the GPU, after the model loaded."""
    gap = _not_rehearsed(ctx)
    data = {**planned.data, "rehearsed": gap is None, "not_rehearsed": gap}
    if gap is None or ctx.target.vllm_location is None or opts.allow_unrehearsed:
        return dataclasses.replace(planned, data=data)
    version = data["vllm"]
    return dataclasses.replace(planned, text=text.not_rehearsed(ctx.who, version, data["edits"], gap),
                               data={**data, "ok": False}, exit_code=1)


def _not_rehearsed(ctx: Context) -> str | None:
    """Why the installed patch has no passing rehearsal on record (None: the overlay's patch
    commit for exactly these bytes records one that passed)."""
    from ..fsutil import hash_file
    from ..report.status import unrehearsed

    state = ctx.files.overlay.state()
    if state is None or state.data["trailers"].get("kind") != "patch" or any(
            hash_file(ctx.target.location / p) != state.head.get(p) for p in ctx.files.tracked):
        return "no rehearsal on record"
    return unrehearsed(state.data["trailers"])

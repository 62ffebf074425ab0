"""The patched wheel in words: what `wheel` wrote, and what `--check`, `status` and `rollback`
say of an installation from one."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..words import agree, listing, plural

if TYPE_CHECKING:
    from ..fleet.build import Built
    from ..fleet.installed import InstalledWheel


def written(path: str, built: Built, source: str) -> str:
    p = built.provenance
    guards = (f"guards read vLLM {p.built_for}, {p.signatures} signatures" if p.built_for
              else "unguarded: rules by their since alone")
    return (f"wrote {path} (sha256 {built.sha256}): {p.package} {p.release} patched for vLLM {p.series} "
            f"(requires {p.vllm_requirement}; {guards}), {plural(len(p.rules), 'rule')} in "
            f"{plural(len(p.files), 'file')}, rehearsal {p.rehearsal.outcome}; from {source}")


def requirement_note(before: str, after: str, why: object) -> str:
    return f"note: requirement {before} is {after} in the wheel: {why}"


def not_built(series: str, why: str) -> str:
    return f"not built: vLLM {series}: {why}"


def source_ignored(path: str, why: str) -> str:
    return f"not used: {path}: {why}"


def all_series(written: int, missing: int) -> str:
    if not missing:
        return f"{plural(written, 'wheel')} written, one per series the compatibility matrix rehearsed"
    return (f"{plural(written, 'wheel')} written; {plural(missing, 'series', 'series')} of the compatibility "
            f"matrix not built (above)")


def drifted(who: str, files: list[str]) -> str:
    n = len(files)
    return (f"{who}: {plural(n, 'file')} {agree(n, 'differs', 'differ')} from the overlay's patched state "
            f"({listing(files)}): a wheel of it would carry edits no rule made; run rollback (the edits are "
            f"kept in the overlay's history) and apply again, or status to see them; nothing was written")


def installed_from(wheel: InstalledWheel) -> str:
    p = wheel.provenance
    built = f", built for vLLM {p.built_for}" if p.built_for else ""
    return (f"installed from the patched wheel {p.package} {p.version} for vLLM {p.series}{built} by {p.tool}: "
            f"{plural(len(p.rules), 'rule')} in {plural(len(p.files), 'file')}, rehearsal {p.rehearsal.outcome}")


def check_patched(who: str, wheel: InstalledWheel, vllm: str | None, replanned: str | None) -> str:
    """`replanned`: what the rules planned against ("the installed vLLM 0.16.0"), None: nothing here."""
    here = (f"the rules plan the same bytes for {replanned}" if replanned
            else f"vLLM {vllm} asked for, in its series; no vLLM here to plan the bytes against (--vllm-source does)"
            if vllm else "no vLLM here, none asked for")
    return f"{who} is patched ({installed_from(wheel)}; RECORD verified; {here})"


def check_other_series(who: str, wheel: InstalledWheel, vllm: str, what: str) -> str:
    p = wheel.provenance
    return (f"{who} is not patched for vLLM {vllm}: it was installed from the patched wheel for vLLM {p.series} "
            f"({p.vllm_requirement}), and {what} is vLLM {vllm}; install the wheel built for that series "
            f"(patch-speculators wheel --vllm-version {vllm} on a box with it), or pin vllm=={p.series}.*")


def diff_on_wheel(who: str, wheel: InstalledWheel, pending: list[str]) -> str:
    p = wheel.provenance
    return (f"the diff is against the files installed from the patched wheel for vLLM {p.series} "
            f"({listing(pending)}); apply works on the release as published: roll back first (patch-speculators "
            f"rollback), or build the wheel for this vLLM (patch-speculators wheel) where {p.package} "
            f"{p.release} is installed as released")


def check_replanned(who: str, wheel: InstalledWheel, vllm: str, reason: str) -> str:
    return (f"{who} was installed from the patched wheel for vLLM {wheel.provenance.series}, but for the vLLM "
            f"{vllm} here: {reason}; rebuild the wheel on a box with vLLM {vllm} (patch-speculators wheel)")


def wheel_drifted(who: str, wheel: InstalledWheel, files: list[str]) -> str:
    n = len(files)
    return (f"{who} has drifted: {plural(n, 'file')} {agree(n, 'differs', 'differ')} from the RECORD of the "
            f"patched wheel it was installed from ({listing(files)}; edited after the install?); reinstall it: "
            f"pip install --force-reinstall --no-deps '{wheel.provenance.package}=={wheel.provenance.version}'")


def status_patched(who: str, wheel: InstalledWheel) -> str:
    return f"patched: {who}, {installed_from(wheel)}; files match its RECORD"


def status_drifted(who: str, wheel: InstalledWheel, files: list[str]) -> str:
    n = len(files)
    return (f"drifted: {who}, {installed_from(wheel)}; {plural(n, 'file')} {agree(n, 'differs', 'differ')} "
            f"from its RECORD (edited after the install?): {listing(files)}")


def rolled_back(who: str, wheel: InstalledWheel, checked: int) -> str:
    p = wheel.provenance
    return (f"rolled back {who} to {p.package} {p.release} as released: reinstalled it (pip, --no-deps) from "
            f"the original wheel rebuilt from the originals the patched wheel keeps; sha256 equal to its RECORD "
            f"for all {checked} files")


def rollback_drifted(who: str, wheel: InstalledWheel, files: list[str]) -> str:
    p = wheel.provenance
    n = len(files)
    return (f"{who} has edits the rollback would lose: {plural(n, 'file')} {agree(n, 'differs', 'differ')} from "
            f"the RECORD of the patched wheel it was installed from ({listing(files)}), and a wheel install keeps "
            f"no overlay to save {agree(n, 'it', 'them')} in; copy {agree(n, 'it', 'them')} away, then reinstall "
            f"the wheel (pip install --force-reinstall --no-deps '{p.package}=={p.version}') and run rollback "
            f"again; nothing was changed")


def rollback_pip_failed(who: str, wheel: InstalledWheel, why: str, now: str, site: str, stash: list[str]) -> str:
    p = wheel.provenance
    left = (f"; pip left {listing(stash)} in {site} (its stash of the files it replaced): remove "
            f"{agree(len(stash), 'it', 'them')} once the install is settled" if stash else "")
    return (f"{who}: pip failed while reinstalling {p.package} {p.release} ({why}); installed now: {p.package} "
            f"{now}{left}; finish by hand: pip install --force-reinstall --no-deps '{p.package}==={p.release}'")


def rollback_by_hand(who: str, wheel: InstalledWheel, why: str) -> str:
    p = wheel.provenance
    return (f"{who} was installed from a patched wheel (no overlay to roll back), and its original cannot be "
            f"reinstalled from it here: {why}; reinstall the release as published: pip install --force-reinstall "
            f"--no-deps '{p.package}==={p.release}' (=== so that a wheelhouse's {p.version} is not taken for it)")


def refuse_patched_wheel(who: str, wheel: InstalledWheel, command: str) -> str:
    p = wheel.provenance
    return (f"{who} is {installed_from(wheel)}; {command} works on the release as published: check this one "
            f"with --check, or reinstall {p.package} {p.release} (patch-speculators rollback) first; "
            f"nothing was written")

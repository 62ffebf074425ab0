"""An installation from a patched wheel: recognised by the `vsp/patch.json` its dist-info holds,
checked against the RECORD the installer wrote, its original rebuilt from the originals it keeps.

Standard library and the bottom layer only: `status` reads it and must start fast.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import TargetError
from ..fsutil import hash_file, record_hash
from ..versions import in_series, parse_version
from ..words import listing
from . import record
from .provenance import PATCH_FILE, Provenance, original_member

if TYPE_CHECKING:
    from ..target import Target


@dataclass(frozen=True)
class InstalledWheel:
    """The patched wheel `target` was installed from."""

    dist_info: str
    provenance: Provenance

    @property
    def label(self) -> str:
        p = self.provenance
        return f"{p.package} {p.version}"

    def holds(self, vllm: str) -> bool:
        """Whether the vLLM version `vllm` is in the series the wheel is for."""
        return in_series(parse_version(vllm, "vLLM version"), parse_version(self.provenance.series, "series"))

    def drift(self, target: Target) -> list[str]:
        """The installed files whose bytes differ from the RECORD the installer wrote (edited or
        deleted after the install), the installer's own files and bytecode aside."""
        rows = [record.Row(e.path, e.hash or "", str(e.size or "")) for e in target.record]
        return record.mismatches(target.location, rows)

    def originals(self, target: Target) -> dict[str, bytes]:
        """The original bytes of the files the wheel patched, each checked against the hash the
        wheel recorded (a damaged copy is refused, never planned from)."""
        out = {}
        for path, hashes in sorted(self.provenance.files.items()):
            data = self._read(target, original_member(path), hashes["original"])
            out[path] = data
        return out

    def _read(self, target: Target, member: str, expected: str) -> bytes:
        full = target.location / self.dist_info / member
        try:
            data = full.read_bytes()
        except OSError as exc:
            raise TargetError(f"{self.label} was installed from a patched wheel, but its copy of an original "
                              f"file cannot be read ({full}: {exc.strerror or exc}): reinstall the wheel") from None
        if record_hash(data) != expected:
            raise TargetError(f"{self.label} was installed from a patched wheel, but its copy of an original "
                              f"file ({full}) does not hold the bytes the wheel recorded: reinstall the wheel")
        return data

    def original_files(self, target: Target) -> dict[str, bytes]:
        """Every file of the original wheel (its RECORD included), each checked against that
        RECORD: the files the wheel left as published from the install, the others from its copies."""
        p = self.provenance
        original_record = self._read(target, original_member(f"{p.original_dist_info}/RECORD"), p.original_record)
        try:
            rows = record.read(original_record)
        except (ValueError, UnicodeDecodeError) as exc:
            raise TargetError(f"{self.label}: the original RECORD it keeps cannot be read ({exc})") from None
        out: dict[str, bytes] = {}
        bad = []
        for row in rows:
            if row.path == f"{p.original_dist_info}/RECORD":
                out[row.path] = original_record
                continue
            if row.path in p.files or row.path == f"{p.original_dist_info}/METADATA":
                out[row.path] = self._read(target, original_member(row.path), row.hash)
                continue
            # An unchanged file: the dist-info's under the patched wheel's folder name.
            here = (f"{self.dist_info}/{row.path[len(p.original_dist_info) + 1:]}"
                    if row.path.startswith(p.original_dist_info + "/") else row.path)
            try:
                data = (target.location / here).read_bytes()
            except OSError:
                bad.append(row.path)
                continue
            if record_hash(data) != row.hash:
                bad.append(row.path)
                continue
            out[row.path] = data
        if bad:
            raise TargetError(f"{listing(bad)} no longer {'holds' if len(bad) == 1 else 'hold'} the bytes "
                              f"{p.package} {p.release} was released with (edited after the install?)")
        return out


def patch_file(target: Target) -> tuple[str, Path] | None:
    """(the dist-info folder, the path of its `vsp/patch.json`) when RECORD lists one."""
    for entry in target.record:
        head, _, rest = entry.path.partition("/")
        if head.endswith(".dist-info") and rest == PATCH_FILE:
            return head, target.location / entry.path
    return None


def find(target: Target) -> InstalledWheel | None:
    """The patched wheel `target` was installed from, None for any other installation."""
    found = patch_file(target)
    if found is None:
        return None
    dist_info, path = found
    if hash_file(path) is None:
        raise TargetError(f"{target.package} {target.version}'s RECORD lists {dist_info}/{PATCH_FILE}, but the "
                          f"file is gone: reinstall the patched wheel (or the release: pip install "
                          f"--force-reinstall --no-deps '{target.package}==={target.version.split('+')[0]}')")
    try:
        provenance = Provenance.from_bytes(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise TargetError(f"{path} is damaged or of another tool's version ({exc}): reinstall the wheel, or "
                          f"rebuild it with this vllm-shim-patch") from None
    if provenance.version != target.version:
        raise TargetError(f"{path} describes {provenance.package} {provenance.version}, but "
                          f"{target.package} {target.version} is installed: reinstall the wheel")
    return InstalledWheel(dist_info, provenance)

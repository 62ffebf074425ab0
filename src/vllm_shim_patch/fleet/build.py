"""The patched wheel from the original wheel's files and the patch's bytes.

Every file of the original wheel goes in as published but the ones the patch changed, which go
in with their patched bytes; the dist-info is renamed for the local version, its METADATA
rewritten (`metadata.py`), `vsp/patch.json` and the originals of the changed files added
(`provenance.py`), RECORD written anew. A pure function of its inputs: the same files and facts
give the same bytes (`archive.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ..errors import UsageError
from ..fsutil import record_hash
from ..words import listing, plural
from . import archive, metadata, naming, record, requirements
from .provenance import PATCH_FILE, Provenance, Rehearsal, original_member


@dataclass(frozen=True)
class Facts:
    """What the command layer knows of the patch: the series, what the guards read, the rules,
    the verdict apply recorded, vLLM's own requirements (None: unknown)."""

    series: str
    built_for: str
    signatures: str
    rules: tuple[str, ...]
    rules_digest: str
    verification: str
    rehearsal: Rehearsal
    vllm_requires: list[str] | None
    tool: str
    skipped: tuple[str, ...] = ()
    options: tuple[str, ...] = ()
    matrix: str = ""
    # Why a relaxed requirement is safe to relax: the rule that makes the newer release work, or
    # what was verified with it installed. Given the rewritten requirement, returns a sentence.
    explain: Callable[[requirements.Rewritten], str] = lambda r: ""


@dataclass(frozen=True)
class Built:
    name: str  # the wheel's file name
    data: bytes
    provenance: Provenance
    metadata: str  # the rewritten METADATA (for the output and the tests)

    @property
    def sha256(self) -> str:
        return archive.sha256(self.data)


@dataclass(frozen=True)
class Original:
    """The original wheel's files, read and checked."""

    files: Mapping[str, bytes]
    dist_info: str
    name: str
    release: str
    tags: list[str]
    record_rows: list[record.Row]

    @classmethod
    def read(cls, files: Mapping[str, bytes]) -> Original:
        infos = sorted({n.split("/", 1)[0] for n in files if n.split("/", 1)[0].endswith(".dist-info")
                        and n.count("/") >= 1})
        with_record = [d for d in infos if f"{d}/RECORD" in files]
        if len(with_record) != 1:
            raise UsageError(f"the original wheel has {len(with_record)} .dist-info folders with a RECORD "
                             f"({', '.join(with_record) or 'none'}): not one wheel of one release")
        dist_info = with_record[0]
        for need in ("METADATA", "WHEEL"):
            if f"{dist_info}/{need}" not in files:
                raise UsageError(f"the original wheel has no {dist_info}/{need}")
        parsed = metadata.parse(files[f"{dist_info}/METADATA"].decode("utf-8"))
        name, release = parsed.value("Name"), parsed.value("Version")
        if not name or not release:
            raise UsageError(f"{dist_info}/METADATA names no Name or Version")
        tags = metadata.parse(files[f"{dist_info}/WHEEL"].decode("utf-8")).values("Tag")
        try:
            rows = record.read(files[f"{dist_info}/RECORD"])
        except (ValueError, UnicodeDecodeError) as exc:
            raise UsageError(f"the original wheel's RECORD cannot be read ({exc})") from None
        listed = {r.path: r.hash for r in rows}
        wrong = sorted(p for p, data in files.items()
                       if p != f"{dist_info}/RECORD" and listed.get(p) != record_hash(data))
        unlisted = sorted(p for p in listed if p not in files and listed[p])
        if wrong or unlisted:
            raise UsageError(f"the original wheel's files do not match its own RECORD "
                             f"({listing(wrong + unlisted)}): not the wheel as published")
        return cls(files, dist_info, name, release, tags, rows)


def _note(facts: Facts, original: Original, version: str, patched: list[str],
          rewritten: list[dict[str, object]]) -> list[str]:
    guards = (f"its guards read vLLM {facts.built_for}'s {facts.signatures} signatures" if facts.built_for
              else "unguarded: the rules applied by their `since` alone")
    lines = [
        f"**{original.name} {original.release} patched by {facts.tool} for vLLM {facts.series}** "
        f"(`{version}`, requires `{naming.vllm_requirement(facts.series)}`; {guards}).",
        "",
        f"- Rules ({plural(len(facts.rules), 'rule')}, digest `{facts.rules_digest}`): "
        f"{', '.join(facts.rules) or '(none)'}"
        + (f"; left out: {', '.join(facts.skipped)}" if facts.skipped else "")
        + (f"; with {', '.join('--' + o for o in facts.options)}" if facts.options else ""),
        f"- Files patched: {', '.join(patched)}",
        f"- Verification: {facts.verification}",
        f"- Rehearsal: {facts.rehearsal.outcome}"
        + (f"; model: {facts.rehearsal.model}" if facts.rehearsal.model else "")
        + (f"; topology: {facts.rehearsal.topology}" if facts.rehearsal.topology else ""),
    ]
    if facts.matrix:
        lines.append(f"- Compatibility matrix: {facts.matrix}")
    for r in rewritten:
        lines.append(f"- Requirement `{r['before']}` is `{r['after']}` here: {r['why']}")
    lines.append(f"- The release as published: `pip install --force-reinstall --no-deps "
                 f"'{original.name}==={original.release}'`, or `patch-speculators rollback`, which rebuilds "
                 f"it from the originals this wheel keeps in its dist-info (vsp/original/)")
    return lines


def build(files: Mapping[str, bytes], patched: Mapping[str, bytes], facts: Facts) -> Built:
    """The patched wheel of the original wheel `files` (every member, RECORD included) with
    `patched` (package path -> patched bytes) in place of the originals."""
    original = Original.read(files)
    naming.series_of(facts.series, "the series")
    for path, data in patched.items():
        if path not in files or path.startswith(original.dist_info + "/") or path.endswith("/RECORD"):
            raise UsageError(f"{path} is not a file of the original wheel's package: the patch and the wheel "
                             f"are of different releases")
        if files[path] == data:
            raise UsageError(f"{path} is listed as patched but holds the original bytes")
    version = naming.local_version(original.release, facts.series, facts.skipped, facts.options)
    dist_info = naming.dist_info_name(original.name, version)
    text = files[f"{original.dist_info}/METADATA"].decode("utf-8")
    requires = metadata.parse(text).values("Requires-Dist")
    series_requirement = naming.vllm_requirement(facts.series)
    replacements, changed = requirements.rewrite(requires, facts.vllm_requires, series_requirement)
    rewritten = [{**c.as_dict(), "why": facts.explain(c)} for c in changed]
    changed_paths = sorted(patched)
    new_metadata = metadata.rewrite(text, version, replacements,
                                    metadata.note(_note(facts, original, version, changed_paths, rewritten)))
    provenance = Provenance(
        package=original.name, release=original.release, version=version, series=facts.series,
        vllm_requirement=series_requirement, built_for=facts.built_for, signatures=facts.signatures,
        rules=facts.rules, rules_digest=facts.rules_digest, verification=facts.verification,
        rehearsal=facts.rehearsal,
        files={p: {"original": record_hash(files[p]), "patched": record_hash(patched[p])} for p in changed_paths},
        original_dist_info=original.dist_info, original_record=record_hash(files[f"{original.dist_info}/RECORD"]),
        tool=facts.tool, skipped=facts.skipped, options=facts.options, requirements=tuple(rewritten),
        matrix=facts.matrix)
    entries: list[archive.Entry] = []
    for path, data in files.items():
        if path.startswith(original.dist_info + "/"):
            rest = path[len(original.dist_info) + 1:]
            if rest in ("RECORD", "METADATA"):
                continue
            entries.append(archive.Entry(f"{dist_info}/{rest}", data))
        else:
            entries.append(archive.Entry(path, patched.get(path, data)))
    entries.append(archive.Entry(f"{dist_info}/METADATA", new_metadata.encode("utf-8")))
    entries.append(archive.Entry(f"{dist_info}/{PATCH_FILE}", provenance.to_bytes()))
    for path in [*changed_paths, f"{original.dist_info}/METADATA", f"{original.dist_info}/RECORD"]:
        entries.append(archive.Entry(f"{dist_info}/{original_member(path)}", files[path]))
    ordered = archive.order(entries, dist_info)
    rec = record.write(((e.name, e.data) for e in ordered), f"{dist_info}/RECORD")
    ordered.append(archive.Entry(f"{dist_info}/RECORD", rec))
    name = naming.wheel_file_name(original.name, version, original.tags)
    return Built(name, archive.zip_bytes(ordered), provenance, new_metadata)


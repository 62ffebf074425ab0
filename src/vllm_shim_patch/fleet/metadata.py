"""METADATA of the patched wheel: the original's, with its version, its requirements and a note.

Edited line by line, never re-serialised: every header the original has keeps its text and its
place; only `Version` and the `Requires-Dist` values change, and the description (the body)
starts with a note on what the wheel carries, since a requirement cannot say why it is what it is.
No header of our own is added: installers and index tools read the core metadata fields only
(the machine-readable record is `vsp/patch.json`).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import UsageError


@dataclass(frozen=True)
class Parsed:
    """METADATA split into header fields (name, the raw text of the field, continuation lines
    included) and the body after the first blank line."""

    fields: list[tuple[str, str]]
    body: str | None

    def values(self, name: str) -> list[str]:
        key = name.lower()
        return [_value(raw) for n, raw in self.fields if n.lower() == key]

    def value(self, name: str) -> str | None:
        found = self.values(name)
        return found[0] if found else None


def _value(raw: str) -> str:
    return raw.split(":", 1)[1].strip()


def parse(text: str) -> Parsed:
    head, sep, body = text.partition("\n\n")
    fields: list[tuple[str, str]] = []
    for line in head.split("\n"):
        if not line:
            continue
        if line[:1] in (" ", "\t") and fields:
            name, raw = fields[-1]
            fields[-1] = (name, f"{raw}\n{line}")
            continue
        if ":" not in line:
            raise UsageError(f"the original METADATA has a header line without a colon: {line[:80]!r}")
        fields.append((line.split(":", 1)[0].strip(), line))
    return Parsed(fields, body if sep else None)


def rewrite(text: str, version: str, replacements: list[list[str]], note: str) -> str:
    """The original METADATA `text` with `version`, each `Requires-Dist` value in order replaced
    by its entry of `replacements` (`requirements.rewrite`), and `note` before the description."""
    parsed = parse(text)
    out: list[str] = []
    seen = 0
    for name, raw in parsed.fields:
        key = name.lower()
        if key == "version":
            out.append(f"Version: {version}")
        elif key == "requires-dist":
            if seen >= len(replacements):
                raise UsageError("the original METADATA has more Requires-Dist fields than were rewritten")
            out += [f"Requires-Dist: {line}" for line in replacements[seen]]
            seen += 1
        else:
            out.append(raw)
    for extra in replacements[seen:]:  # no Requires-Dist in the original: the series' goes last
        out += [f"Requires-Dist: {line}" for line in extra]
    body = note if parsed.body is None else f"{note}\n{parsed.body}"
    return "\n".join(out) + "\n\n" + body


def note(lines: list[str]) -> str:
    """The description's preface: plain lines that read the same as text and as Markdown."""
    return "\n".join(lines) + "\n\n---\n"

"""The rehearsal's model families as the README's table, generated from the one family table
(`_remote/rehearse/families/`, read through `analysis/rehearse.py`); a test keeps the README's
copy current. `python -m vllm_shim_patch.report.families` prints it."""

from __future__ import annotations

from ..analysis.rehearse import families


def table() -> str:
    """A Markdown table: each family's `--arch` names, its architectures, what of it is rehearsed."""
    table = families()
    lines = ["| family (`--arch`) | architectures | what of it is rehearsed |", "|---|---|---|"]
    for name, family in table.FAMILIES.items():
        names = ", ".join(f"`{n}`" for n in (name, *family.PRESETS))
        if name == table.DEFAULT:
            names += " (default)"
        lines.append(f"| {names} | {', '.join(family.ARCHITECTURES)} | {family.SUMMARY} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(table(), end="")

"""The audit as text and JSON."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..kinds import BindStatus
from ..words import plural

if TYPE_CHECKING:
    from ..analysis.audit import AuditRow
    from ..analysis.packages import PackageAudit
    from ..analysis.verify import Binding

_KIND_LABEL = {"call": "", "method": "method ", "import": "import ", "attribute": "attribute "}
_KIND_NOUN = {"call": "call", "method": "method call", "import": "import", "attribute": "attribute read"}


def line(b: Binding, after: Binding | None = None) -> str:
    """Where the use is in the package as installed, and how it checks in the end (after the
    rules, when they change the file)."""
    final = after or b
    why = f" ({final.reason})" if final.reason else ""
    return f"{b.call.path}:{b.call.line}: {_KIND_LABEL[b.call.kind]}{b.call.callee}: {final.status}{why}"


def render(rows: list[AuditRow], who: str, against: str, verbose: bool,
           rules: bool = True, unscanned: dict[str, str] | None = None,
           packages: PackageAudit | None = None) -> tuple[str, dict[str, Any]]:
    """`unscanned`: files that could not be read (path -> why): not audited. `packages`: the
    imports of other packages, checked in the target."""
    unscanned = unscanned or {}
    counts = {k: sum(r.before.call.kind == k and not r.added for r in rows) for k in _KIND_NOUN}
    parts = ", ".join(plural(n, _KIND_NOUN[k]) for k, n in counts.items() if n)
    added = sum(r.added for r in rows)
    more = f", and {added} the rules add" if added else ""
    lines = [f"{who} against {against}: {plural(len(rows) - added, 'use')} of vLLM"
             + (f" ({parts})" if parts else "") + more]
    lines += _rows(rows, verbose, rules)
    if packages is not None and packages.rows:
        lines.append(_packages_head(packages))
        lines += _rows(packages.rows, verbose, rules, grouped=set(packages.not_installed))
    lines += [f"  {path}: not audited: {why}" for path, why in sorted(unscanned.items())]
    summary = _summary(rows)
    lines.append(
        _summary_words(summary, "use", rules)
        + (f"; {_summary_words(_summary(packages.rows), 'import', rules, ' of other packages')}"
           if packages is not None and packages.rows else "")
        + (f"; {plural(len(unscanned), 'file')} not audited (above)" if unscanned else "")
    )
    data = {
        "uses": [_row_data(r) for r in rows],
        "summary": {**summary, **{k: n for k, n in counts.items()}},
        "not_audited": [{"path": p, "reason": why} for p, why in sorted(unscanned.items())],
        "packages": _packages_data(packages),
    }
    return "\n".join(lines), data


def _packages_head(packages: PackageAudit) -> str:
    """The second section's first line: how many imports, of which distributions as installed."""
    rows = packages.rows
    added = sum(r.added for r in rows)
    found = [d for dists in packages.distributions.values() for d in dists]
    found += [f"{top} (no distribution)" for top, dists in packages.distributions.items() if not dists]
    what = ", ".join(sorted(dict.fromkeys(found), key=str.lower))
    if packages.not_installed:
        what += ("; " if what else "") + "not installed: " + ", ".join(sorted(packages.not_installed))
    more = f", and {added} the rules add" if added else ""
    where = f" ({what})" if what else ""
    return f"{plural(len(rows) - added, 'import')} of other packages, checked in the target{where}{more}"


def _rows(rows: list[AuditRow], verbose: bool, rules: bool, grouped: frozenset[str] | set[str] = frozenset()
          ) -> list[str]:
    """One line per finding; the imports of a package that is not installed (`grouped`) are one
    finding: the first import, and how many more."""
    lines: list[str] = []
    groups: dict[str, list[int]] = {}
    for i, row in enumerate(rows):
        if not verbose and not row.added and row.unknown and _top(row) in grouped:
            groups.setdefault(_top(row), []).append(i)
    more = {g[0]: len(g) - 1 for g in groups.values()}
    hidden = {i for g in groups.values() for i in g[1:]}
    for i, row in enumerate(rows):
        if i in hidden:
            continue
        if i in more:
            tail = f" (and {plural(more[i], 'more import')} of {_top(row)})" if more[i] else ""
            lines.append(f"  {line(row.before, row.after)}{tail}")
            continue
        b = row.before
        if row.added:
            if b.status is not BindStatus.OK or verbose:
                tail = " -> the rules write this; fix the rule" if row.remaining else ""
                lines.append(f"  {line(b)} (added by the rules; line of the patched file){tail}")
            continue
        if row.fixed:
            how = "taken out" if row.removed else "fixed"
            lines.append(f"  {line(b)} -> {how} by {', '.join(row.rules) or 'the rules'}")
        elif row.remaining:
            verdict = " -> no rule fixes this" if rules else ""
            if row.suggestion:
                lines.append(f"  {line(b, row.after)}{verdict}{';' if rules else ' ->'} suggested rule:")
                lines += ["      " + text for text in row.suggestion.splitlines()]
            else:
                lines.append(f"  {line(b, row.after)}{verdict}")
        elif row.unknown or verbose:
            lines.append(f"  {line(b, row.after)}" + (" -> taken out by the rules" if row.removed else ""))
    return lines


def _top(row: AuditRow) -> str:
    return row.before.call.callee.split(".")[0]


def _summary(rows: list[AuditRow]) -> dict[str, int]:
    fixed = sum(r.fixed for r in rows)
    remaining = sum(r.remaining for r in rows)
    unknown = sum(r.unknown for r in rows)
    return {"uses": len(rows), "added": sum(r.added for r in rows), "ok": len(rows) - fixed - remaining - unknown,
            "fixed": fixed, "remaining": remaining, "unknown": unknown}


def _summary_words(s: dict[str, int], noun: str, rules: bool, of: str = "") -> str:
    if rules:
        return (f"{plural(s['uses'], noun)}{of}: {s['ok']} ok, {s['fixed']} fixed by the rules, "
                f"{s['remaining']} still mismatched, {s['unknown']} unknown")
    return f"{plural(s['uses'], noun)}{of}: {s['ok']} ok, {s['remaining']} mismatched, {s['unknown']} unknown"


def _row_data(r: AuditRow) -> dict[str, Any]:
    return {**r.before.as_dict(), "kind": r.before.call.kind,
            "end_line": r.before.call.end_line or r.before.call.line,
            "after": r.after.as_dict() if r.after else None, "rules": list(r.rules),
            "fixed": r.fixed, "remaining": r.remaining, "suggestion": r.suggestion or None,
            "moved_to": list(r.moved_to), "added": r.added, "removed": r.removed}


def _packages_data(packages: PackageAudit | None) -> dict[str, Any] | None:
    if packages is None:
        return None
    return {"uses": [_row_data(r) for r in packages.rows], "summary": _summary(packages.rows),
            "distributions": packages.distributions, "not_installed": packages.not_installed,
            "note": packages.note or None}


def imports_timed(modules: int, seconds: float) -> str:
    """The -v line for the imports of other packages in the target (they cost seconds)."""
    return f"imported {plural(modules, 'module')} of other packages in the target in {seconds:.1f}s"


def against(vllm: str | None, version: str, planned: bool, applied: list[str], kind: str | None) -> str:
    """What the audit checked against: the installed vLLM, the rules' version, the signatures."""
    installed = f"vLLM {vllm}" if vllm else "no installed vLLM"
    if not planned:
        rules_for = f"vLLM {version}, the files as installed"
    elif applied:
        rules_for = f"rules for {version}, installed in {plural(len(applied), 'file')}"
    else:
        rules_for = f"rules for {version}"
    return f"{installed}, {rules_for} ({kind or 'no'} signatures)"


def with_notes(text: str, unread: list[tuple[str, bool]], note: str) -> str:
    """`text` after a note for each file not audited ((path, exists)) and the signatures' note."""
    for path, exists in reversed(unread):
        what = "cannot be read" if exists else "is missing (RECORD lists it)"
        text = f"note: {path} {what}: not audited\n{text}"
    return f"note: {note}\n{text}" if note else text


def emitted(dest: str, path: str | None, rules: int, placeholders: int) -> str:
    """The --emit-rules line: the draft written (`path`), or why not."""
    if path is None:
        return f"no mismatch a rule can express: {dest} not written"
    todo = f"; fill {placeholders} placeholder{'s' if placeholders != 1 else ''} before use" if placeholders else ""
    return f"draft rules for {rules} mismatch{'es' if rules != 1 else ''} written to {path}{todo}"

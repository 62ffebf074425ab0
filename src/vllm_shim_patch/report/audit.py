"""The audit as text and JSON."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..words import plural

if TYPE_CHECKING:
    from ..analysis.audit import AuditRow
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
           rules: bool = True, unscanned: dict[str, str] | None = None) -> tuple[str, dict[str, Any]]:
    """`unscanned`: files that mention vLLM but could not be read (path -> why): not audited."""
    unscanned = unscanned or {}
    counts = {k: sum(r.before.call.kind == k and not r.added for r in rows) for k in _KIND_NOUN}
    parts = ", ".join(plural(n, _KIND_NOUN[k]) for k, n in counts.items() if n)
    added = sum(r.added for r in rows)
    more = f", and {added} the rules add" if added else ""
    lines = [f"{who} against {against}: {plural(len(rows) - added, 'use')} of vLLM"
             + (f" ({parts})" if parts else "") + more]
    for row in rows:
        b = row.before
        if row.added:
            if b.status != "ok" or verbose:
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
    fixed = sum(r.fixed for r in rows)
    remaining = sum(r.remaining for r in rows)
    unknown = sum(r.unknown for r in rows)
    ok = len(rows) - fixed - remaining - unknown
    lines += [f"  {path}: not audited: {why}" for path, why in sorted(unscanned.items())]
    lines.append(
        (f"{plural(len(rows), 'use')}: {ok} ok, {fixed} fixed by the rules, "
         f"{remaining} still mismatched, {unknown} unknown"
         if rules else f"{plural(len(rows), 'use')}: {ok} ok, {remaining} mismatched, {unknown} unknown")
        + (f"; {plural(len(unscanned), 'file')} not audited (above)" if unscanned else "")
    )
    data = {
        "uses": [
            {**r.before.as_dict(), "kind": r.before.call.kind,
             "end_line": r.before.call.end_line or r.before.call.line,
             "after": r.after.as_dict() if r.after else None, "rules": list(r.rules),
             "fixed": r.fixed, "remaining": r.remaining, "suggestion": r.suggestion or None,
             "moved_to": list(r.moved_to), "added": r.added, "removed": r.removed}
            for r in rows
        ],
        "summary": {"uses": len(rows), "added": added, "ok": ok, "fixed": fixed, "remaining": remaining,
                    "unknown": unknown,
                    **{k: n for k, n in counts.items()}},
        "not_audited": [{"path": p, "reason": why} for p, why in sorted(unscanned.items())],
    }
    return "\n".join(lines), data


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

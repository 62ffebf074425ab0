"""The audit: every use of vLLM in the package, checked before and after the rules would run.

Imports, attribute reads and method calls are checked for existence in vLLM's source
(`members.py`); calls are bound to their signature. A mismatch the rules fix is reported with the
rule; one they do not fix gets a suggested rule. What cannot be decided is unknown, with why.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from difflib import SequenceMatcher
from typing import TYPE_CHECKING, Any

from ..signatures.words import bind_reason, existence_reason
from ..kinds import Action, BindStatus
from .calls import ATTRIBUTE, CALL, IMPORT, METHOD, CallRecord
from .verify import Binding

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..rewrite.results import FileResult
    from ..signatures.model import BindResult, Existence
    from ..signatures.static.members import Members


@dataclass(frozen=True)
class AuditRow:
    before: Binding  # the use as the package has it now
    after: Binding | None  # the same use once the rules ran (None: the file is not changed)
    rules: tuple[str, ...]
    suggestion: str  # a YAML rule for a mismatch no rule fixes
    moved_to: tuple[str, ...] = ()  # a missing import: public modules that define the name now
    added: bool = False  # a use the rules add (before is after: its line is in the patched file)
    removed: bool = False  # a use the rules take out (a moved name's old import), or replace by others

    @property
    def fixed(self) -> bool:
        if self.before.status is not BindStatus.MISMATCH:
            return False
        return self.removed or (self.after is not None and self.after.status is BindStatus.OK)

    @property
    def remaining(self) -> bool:
        final = self.after if self.after is not None else self.before
        return not self.removed and final.status is BindStatus.MISMATCH

    @property
    def unknown(self) -> bool:
        final = self.after if self.after is not None else self.before
        return not self.removed and final.status is BindStatus.UNKNOWN


def suggest(call: CallRecord, reason: str, version: str, sig: Any = None, bound: BindResult | None = None) -> str:
    """A rule skeleton for one mismatch (`reason`; `bound`: how the call binds, when it was
    bound), in the bundled pack's own format (what `--emit-rules` drafts for it)."""
    from .draft import operation, renames, rule_id

    short = call.callee.rsplit(".", 1)[1]
    suffix, op_line = operation(bound, renames(bound, sig, call.keywords)) or ("notice", f'notice: "{reason}"')
    rid = rule_id(short, suffix)
    return "\n".join([
        f"- id: {rid}",
        f"  call: {call.callee}",
        f'  since: "{version}"',
        *(f"  {line}" for line in op_line.splitlines()),
        f'  why: "vLLM {version}: {reason}"',
    ])


class Checker:
    """Checks one use against vLLM: signatures for calls, the source for existence."""

    def __init__(self, signatures: dict[str, Any], note: str, members: Members | None,
                 source: Any = None):
        self.signatures = signatures
        self.note = note
        self.members = members
        self.source = source  # the static reader, for why a signature is unknown
        self._imports: dict[CallRecord, Existence] = {}

    def moved(self, use: CallRecord) -> tuple[str, ...]:
        """Where a public name of that name lives in this vLLM (for a missing import)."""
        found = self._imports.get(use)
        return found.moved_to if found is not None else ()

    def check(self, use: CallRecord, missing_imports: frozenset[str] = frozenset()) -> Binding:
        found = self._check(use, missing_imports)
        if found.status is BindStatus.MISMATCH and use.conditional:
            # Compatibility code: the other branch is what runs on this vLLM.
            return Binding(use, BindStatus.UNKNOWN, f"{found.reason}; {use.conditional}", bound=found.bound)
        return found

    def _check(self, use: CallRecord, missing_imports: frozenset[str] = frozenset()) -> Binding:
        if use.kind == IMPORT:
            return self._import(use)
        if self.members is None:
            found: bool | None = None
            why = "no vLLM source to read"
        else:
            found, why = self.members.exists(use.callee, use.on_instance, use.declared).answer
        if found is False:
            if any(use.callee == m or use.callee.startswith(m + ".") for m in missing_imports):
                return Binding(use, BindStatus.UNKNOWN, f"not bound: {why} (see the import)")
            return Binding(use, BindStatus.MISMATCH, why)
        if use.kind == ATTRIBUTE:
            return Binding(use, BindStatus.OK if found else BindStatus.UNKNOWN, "" if found else why)
        sig = self.signatures.get(use.callee)
        if sig is None:
            reason = (self.source.unknown_reason(use.callee) if self.source is not None else None) or (
                why if found is None else "") or self.note or "signature unknown"
            return Binding(use, BindStatus.UNKNOWN, reason)
        if use.kind == METHOD and use.on_instance:
            sig, problem = _bound(sig)
            if sig is None:
                return Binding(use, BindStatus.UNKNOWN, problem)
        result = use.bind(sig)
        return Binding(use, result.status, bind_reason(result), bound=result)

    def _import(self, use: CallRecord) -> Binding:
        if self.members is None:
            return Binding(use, BindStatus.UNKNOWN, "no vLLM source to check imports against")
        whole = use.whole_module
        found = self.members.imported(use.callee, whole_module=whole)
        self._imports[use] = found
        status = {True: BindStatus.OK, False: BindStatus.MISMATCH, None: BindStatus.UNKNOWN}[found.found]
        return Binding(use, status, existence_reason(found, imported=not whole))


def _bound(sig: Any) -> tuple[Any, str]:
    """The signature as called on an instance: without self (a staticmethod or classmethod
    read off the class has none to drop, and keeps a first parameter not named self)."""
    params = sig.params
    if params and params[0].name == "self" and params[0].kind in ("positional_only", "positional_or_keyword"):
        return replace(sig, params=params[1:]), ""
    if params and params[0].kind == "var_positional":
        return sig, ""
    return None, f"cannot tell whether {sig.qualname} takes self (its first parameter is not named self)"


def audit_plan(pending: Sequence[FileResult], uses: dict[str, list[CallRecord]],
               after_uses: dict[str, list[CallRecord]], checker: Checker, version: str) -> list[AuditRow]:
    """Check every use of vLLM in the files as `uses` read them and, where a pending result of the
    plan changes a file, after it (a result's EDITED sites name the rules that fix a use on their
    line; its `before` is the bytes `uses` read, its `after` the bytes `after_uses` read)."""
    changed = {r.path: r for r in pending}
    rows = []
    for path in sorted(uses):
        before_uses = uses[path]
        if not before_uses:
            continue
        result = changed.get(path)
        edited: dict[int, list[str]] = {}
        by_callee: dict[str, list[str]] = {}
        spans: list[tuple[int, int, str]] = []  # what a scoped rule rewrote whole (a method)
        for site in (result.sites if result else ()):
            if site.action is Action.EDITED:
                edited.setdefault(site.line, []).append(site.rule_id)
                spans.append((site.line, site.end_line, site.rule_id))
                if site.moves:  # a move edits the import too
                    by_callee.setdefault(site.callee, []).append(site.rule_id)
        before = _check_file(before_uses, checker)
        after: list[Binding | None] = [None] * len(before)
        added: list[Binding] = []
        removed: set[int] = set()
        if result is not None:
            checked_after = _check_file(after_uses.get(path, []), checker)
            pairs = _pair(before_uses, after_uses.get(path, []), result.before, result.after)
            for i, j in pairs:
                after[i] = checked_after[j]
            paired = {j for _, j in pairs}
            added = [b for j, b in enumerate(checked_after) if j not in paired]
            removed = set(range(len(before))) - {i for i, _ in pairs}
        for i, (b, a) in enumerate(zip(before, after)):
            rules = tuple(edited.get(b.call.line, ()))
            final = a if a is not None else b
            text = ""
            if final.status is BindStatus.MISMATCH and b.call.kind == CALL:  # a rule's call: an imported name
                text = suggest(final.call, final.reason, version, checker.signatures.get(b.call.callee), final.bound)
            moved = checker.moved(b.call) if b.call.kind == IMPORT and b.status is BindStatus.MISMATCH else ()
            if b.call.kind == IMPORT and (i in removed or (a is not None and a.call.callee != b.call.callee)):
                # An import a move pointed elsewhere or took out: the rule that moved calls of that name.
                rules = rules or tuple(dict.fromkeys(by_callee.get(b.call.callee, ())))
            if i in removed:
                text, moved = "", ()
                # A use inside what a rule rewrote whole (a codemod's method) went with that edit.
                rules = rules or tuple(dict.fromkeys(r for a, z, r in spans if a <= b.call.line <= z))
            rows.append(AuditRow(b, a, rules, text, moved, removed=i in removed))
        # What the rules write is checked too: an added call must bind like any other.
        rows += [AuditRow(b, b, (), "", (), added=True) for b in added]
    if checker.members is not None:
        checker.members.save()
    return rows


def _check_file(uses: list[CallRecord], checker: Checker) -> list[Binding]:
    first = [checker.check(u) if u.kind == IMPORT else None for u in uses]
    missing = frozenset(u.callee for u, b in zip(uses, first) if b is not None and b.status is BindStatus.MISMATCH)
    return [b if b is not None else checker.check(u, missing) for u, b in zip(uses, first)]


def _pair(before: list[CallRecord], after: list[CallRecord], old: bytes = b"", new: bytes = b""
          ) -> list[tuple[int, int]]:
    """Which use after the rules is which use before (`old`, `new`: the bytes each list was read
    from). A use on a line the rules left as it was is the use on that line after them: a move
    renames what the line calls, not the line, and code a rule inserts before it does not take its
    place. The uses between two such lines are paired by their sequence of (kind, name), and an
    import left over with one the rules wrote elsewhere."""
    keys_a = [(u.kind, u.callee) for u in before]
    keys_b = [(u.kind, u.callee) for u in after]
    at_line: dict[int, list[int]] = {}
    for j, u in enumerate(after):
        at_line.setdefault(u.line, []).append(j)
    on_line: dict[int, list[int]] = {}
    for i, u in enumerate(before):
        on_line.setdefault(u.line, []).append(i)
    kept = _kept_lines(old, new)
    anchors: list[tuple[int, int]] = []
    for line, mine in on_line.items():
        theirs = at_line.get(kept.get(line, -1), [])
        for a, b in _align([keys_a[i] for i in mine], [keys_b[j] for j in theirs]):
            # Both lists are in line order, so anchors only ever go forward (kept for safety).
            if not anchors or (mine[a] > anchors[-1][0] and theirs[b] > anchors[-1][1]):
                anchors.append((mine[a], theirs[b]))
    pairs: list[tuple[int, int]] = []
    i0 = j0 = 0
    for i, j in [*anchors, (len(before), len(after))]:
        pairs += [(i0 + a, j0 + b) for a, b in _align(keys_a[i0:i], keys_b[j0:j])]
        if i < len(before):
            pairs.append((i, j))
        i0, j0 = i + 1, j + 1
    # An import the rules wrote elsewhere is the same import: a move splits `from m import a, b`
    # in two, and what lands out of the kept lines' order is paired by its name, the same name
    # first, then the same last name (what a move keeps).
    for short in (False, True):
        done = {i for i, _ in pairs}
        paired = {j for _, j in pairs}
        left: dict[tuple[str, str], list[int]] = {}
        for j, key in enumerate(keys_b):
            if key[0] == IMPORT and j not in paired:
                left.setdefault(_name(key, short), []).append(j)
        pairs += [(i, left[_name(key, short)].pop(0)) for i, key in enumerate(keys_a)
                  if key[0] == IMPORT and i not in done and left.get(_name(key, short))]
    return sorted(pairs)


def _name(key: tuple[str, str], short: bool) -> tuple[str, str]:
    return (key[0], key[1].rsplit(".", 1)[-1]) if short else key


def _kept_lines(old: bytes, new: bytes) -> dict[int, int]:
    """Each line of `old` the rules left as it was -> its line in `new` (1-based, as uses are)."""
    if not old or not new:
        return {}
    matcher = SequenceMatcher(None, old.splitlines(), new.splitlines(), autojunk=False)
    return {a + k + 1: b + k + 1 for a, b, size in matcher.get_matching_blocks() for k in range(size)}


def _align(keys_a: list[tuple[str, str]], keys_b: list[tuple[str, str]]) -> list[tuple[int, int]]:
    """The same sequence of (kind, name), with a replaced stretch of the same kinds paired in order
    (a rename changes the name, not the position); in one whose lengths or kinds differ (uses the
    rules added or took out among renamed ones), the uses of one kind and last name are paired."""
    pairs = []
    for tag, i1, i2, j1, j2 in SequenceMatcher(None, keys_a, keys_b, autojunk=False).get_opcodes():
        if tag == "equal" or (tag == "replace" and [k for k, _ in keys_a[i1:i2]] == [k for k, _ in keys_b[j1:j2]]):
            pairs += list(zip(range(i1, i2), range(j1, j2)))
        elif tag == "replace":
            short_a = [_name(key, True) for key in keys_a[i1:i2]]
            short_b = [_name(key, True) for key in keys_b[j1:j2]]
            for a, b, size in SequenceMatcher(None, short_a, short_b, autojunk=False).get_matching_blocks():
                pairs += [(i1 + a + k, j1 + b + k) for k in range(size)]
    return pairs


__all__ = ["ATTRIBUTE", "CALL", "IMPORT", "METHOD", "AuditRow", "Checker", "audit_plan", "suggest"]

"""`audit --emit-rules`: a draft rule file for the mismatches a rule can express.

- an unexpected keyword: `rename` when the signature has one unpassed parameter of a close name
  (the obvious rename), else `drop`;
- a missing required argument: `add` with the value "TODO: an expression", which the loader
  refuses (it is no Python expression), so `rules check` fails until a human fills it in;
- a missing import whose name one public module defines now, called in the file: `move`.

Each rule carries its site as an example: `before` is the call as the package has it (with the
import it needs), `after` what the engine makes of it with this very rule, so `rules test` runs it
once the placeholders are filled. What no rule can say (a method or attribute that is gone, a
positional surplus) is listed as a comment.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..kinds import BindStatus
from .calls import CALL, IMPORT

if TYPE_CHECKING:
    from ..signatures.model import BindResult

# Rows are analysis.audit's AuditRow (not imported: audit imports this module for suggestions).
AuditRow = Any
PLACEHOLDER = "TODO: an expression"
_SENTINEL = "__vsp_todo__"  # stands for the placeholder while the engine computes `after`


@dataclass
class Draft:
    id: str
    call: str
    op: str  # the YAML operation lines, e.g. "drop: [block_size]" (one per line)
    why: str
    placeholders: int = 0  # the values a human must fill in (`add`'s PLACEHOLDER)
    sites: list[tuple[str, int, str]] = field(default_factory=list)  # path, line, code
    examples: list[tuple[str, str]] = field(default_factory=list)


def drafts(rows: list[AuditRow], signatures: dict[str, Any], version: str,
           taken: set[str]) -> tuple[list[Draft], list[str]]:
    """The draft rules for the remaining mismatches, and a line for each one no rule expresses."""
    out: dict[tuple[str, str], Draft] = {}
    left: list[str] = []
    calls: dict[tuple[str, str], list[str]] = {}
    for r in rows:
        if r.before.call.kind == CALL:
            calls.setdefault((r.before.call.path, r.before.call.callee), []).append(r.before.call.code)
    called = set(calls)
    for row in rows:
        if not row.remaining or row.before.status is not BindStatus.MISMATCH and row.after is None:
            continue
        final = row.after or row.before
        use = row.before.call
        where = f"{use.path}:{use.line}"
        made = _rule(use, final.bound, signatures.get(use.callee), row, called)
        if made is None:
            left.append(f"{where}: {use.kind} {use.callee}: {final.reason}")
            continue
        short, suffix, op, todo = made
        key = (use.callee, op)
        if key not in out:
            rid = _unique(rule_id(short, suffix), taken)
            out[key] = Draft(rid, use.callee, op, f"vLLM {version}: {final.reason}", todo)
        # A moved name's example is its call (the import follows the call).
        codes = calls.get((use.path, use.callee), []) if use.kind == IMPORT else [use.code]
        out[key].sites += [(use.path, use.line, code) for code in codes]
    for d in out.values():
        d.examples = [ex for path, line, code in d.sites if (ex := _example(d, code)) is not None]
    return list(out.values()), left


def _rule(use: Any, bound: BindResult | None, sig: Any, row: AuditRow, called: set[tuple[str, str]]
          ) -> tuple[str, str, str, int] | None:
    short = use.callee.rpartition(".")[2]
    if use.kind == IMPORT:
        moved = row.moved_to
        if len(moved) == 1 and (use.path, use.callee) in called and row.before.status is BindStatus.MISMATCH:
            return short, "move", f"move: {moved[0]}.{short}", 0
        return None
    if use.kind != CALL:
        return None  # a method call or attribute: a rule's `call` names an imported callable
    # The keywords of the call as the rules leave it: the binding is about that call.
    renamed = renames(bound, sig, (row.after or row.before).call.keywords)
    found = operation(bound, renamed)
    return (short, *found, len(_added(bound, renamed))) if found and bound is not None else None


def renames(bound: BindResult | None, sig: Any, passed: tuple[str, ...]) -> dict[str, str]:
    """The obvious renames: each unexpected keyword with one unpassed parameter of a close name."""
    renamed: dict[str, str] = {}
    if sig is None or bound is None:
        return renamed
    free = [p.name for p in sig.params if p.kind in ("positional_or_keyword", "keyword_only")
            and p.name not in passed]
    for old in bound.unexpected:
        close = difflib.get_close_matches(old, free, n=2, cutoff=0.75)
        if len(close) == 1 and close[0] not in renamed.values():
            renamed[old] = close[0]
    return renamed


def rule_id(short: str, suffix: str) -> str:
    """`_get_x` + `move` → `get-x-move`: the loader's id shape (no leading or doubled dash)."""
    return re.sub(r"-+", "-", f"{short}-{suffix}".replace("_", "-").lower()).strip("-")


def _added(bound: BindResult | None, renamed: dict[str, str]) -> list[str]:
    return [n for n in (bound.missing if bound is not None else ()) if n not in renamed.values()]


def operation(bound: BindResult | None, renamed: dict[str, str] | None = None) -> tuple[str, str] | None:
    """(id suffix, YAML operation lines) for a binding mismatch `rename`, `drop` and `add` can fix
    (`renamed`: unexpected keywords to rename, each to an unpassed parameter), else None."""
    renamed = renamed or {}
    if bound is None or not bound.unexpected and not bound.missing:
        return None
    if bound.keyword_problems or bound.too_many is not None:
        return None  # a rule doing part of it would leave the call failing (a positional to move)
    dropped = [n for n in bound.unexpected if n not in renamed]
    added = _added(bound, renamed)
    suffix, ops = [], []
    if renamed:
        suffix.append("rename-" + "-".join(renamed))
        ops.append("rename: {" + ", ".join(f"{a}: {b}" for a, b in renamed.items()) + "}")
    if dropped:
        suffix.append("drop-" + "-".join(dropped))
        ops.append(f"drop: [{', '.join(dropped)}]")
    if added:
        suffix.append("add-" + "-".join(added))
        ops.append("add: {" + ", ".join(f"{n}: {json.dumps(PLACEHOLDER)}" for n in added) + "}")
    return "-".join(suffix), "\n".join(ops)


def _unique(rid: str, taken: set[str]) -> str:
    candidate, n = rid, 2
    while candidate in taken:
        candidate, n = f"{rid}-{n}", n + 1
    taken.add(candidate)
    return candidate


def _example(d: Draft, code: str) -> tuple[str, str] | None:
    """The site as a rule example: the call with the import it needs, and what the rule makes of it."""
    from ..rules.loader import parse_rules
    from ..rules.testing import Case, run_case

    module, _, name = d.call.rpartition(".")
    head = code.split("(", 1)[0].strip()
    if head == name:
        imports = f"from {module} import {name}\n"
    elif head.endswith("." + name) and head.count(".") == 1:
        imports = f"import {module} as {head.split('.')[0]}\n" if "." in module else f"import {module}\n"
    else:
        return None
    before = f"{imports}{_dedent(code)}\n"
    rule_text = _render([Draft(d.id, d.call, d.op.replace(json.dumps(PLACEHOLDER), _SENTINEL), d.why)], "0")
    try:
        rule = parse_rules(rule_text)[0]
    except Exception:  # noqa: BLE001 - a draft the loader refuses gets no example, not a crash
        return None
    result = run_case(Case(d.id, rule, before, before))
    if result.actual == before:
        return None
    return before, result.actual.replace(_SENTINEL, PLACEHOLDER)


def _dedent(code: str) -> str:
    """A call's text as found (continuation lines keep the file's indentation), moved to column 0."""
    first, *rest = code.split("\n")
    indent = min((len(line) - len(line.lstrip()) for line in rest if line.strip()), default=0)
    return "\n".join([first, *(line[indent:] for line in rest)])


def _block(text: str, indent: str) -> list[str]:
    return [f"{indent}{line}" if line.strip() else "" for line in text.rstrip("\n").split("\n")]


def _render(items: list[Draft], since: str) -> str:
    lines = ["schema: 1", "rules:"]
    for d in items:
        lines += [f"  - id: {d.id}", f"    call: {d.call}", f"    since: {json.dumps(since)}",
                  *(f"    {op}" for op in d.op.splitlines()), f"    why: {json.dumps(d.why)}"]
        if d.examples:
            lines.append("    examples:")
            for before, after in d.examples:
                lines += ["      - before: |", *_block(before, "          "),
                          "        after: |", *_block(after, "          ")]
    return "\n".join(lines) + "\n"


def render(items: list[Draft], left: list[str], since: str, who: str, package: str) -> str:
    """The draft rule file: the rules, then what no rule expresses, as comments."""
    head = [
        f"# Draft rules written by `patch-speculators audit --emit-rules` for {who} against vLLM {since}.",
        f'# Review every rule; replace each "{PLACEHOLDER}" (in `add` and in the example after it)',
        "# with the value to pass: `rules check` refuses this file until then. Then: rules test FILE.",
    ]
    for d in items:
        head.append(f"#   {d.id}: {', '.join(dict.fromkeys(f'{p}:{n}' for p, n, _ in d.sites))}")
    body = _render(items, since).replace("schema: 1\n", f"schema: 1\npackage: {package}\n", 1)
    tail = ["", "# Mismatches no rule can express (a rule's `call` names an imported callable):"] if left else []
    tail += [f"#   {line}" for line in left]
    return "\n".join(head) + "\n" + body + ("\n".join(tail) + "\n" if tail else "")

"""`rules list|check|test|docs`: the rule files themselves."""

from __future__ import annotations

from collections.abc import Sequence

from ..report.text import plural
from ..settings import Settings
from .context import Outcome


def rules_list(settings: Settings) -> Outcome:
    from ..rules.loader import load_pack

    pack = load_pack(settings.rules)
    data = [
        {"id": r.id, "since": str(r.since), "calls": list(r.calls), "operations": list(r.operations),
         "why": r.why, "file": r.path, "line": r.line}
        for r in pack.rules
    ]
    width = max((len(r.id) for r in pack.rules), default=2)
    lines = [f"{r.id:<{width}}  since {str(r.since):<8} {', '.join(r.operations):<12} {r.target}"
             for r in pack.rules]
    return Outcome("\n".join(lines), data)


def rules_check(settings: Settings, paths: Sequence[str]) -> Outcome:
    from ..rules.loader import load_pack

    pack = load_pack([*settings.rules, *paths], bundled=not paths)
    text = f"{plural(len(pack.rules), 'rule')} OK in {plural(len(pack.sources), 'file')}"
    return Outcome(text, {"rules": len(pack.rules), "files": list(pack.sources)})


def rules_test(settings: Settings, paths: Sequence[str]) -> Outcome:
    from ..rules.loader import load_pack
    from ..rules.testing import cases, run_case

    pack = load_pack([*settings.rules, *paths], bundled=not paths)
    results = [run_case(c) for c in cases(pack.rules)]
    bad = [r for r in results if not r.ok]
    lines = []
    for r in bad:
        lines.append(f"FAIL {r.case.id} ({r.case.rule.path}): {r.problem}")
        lines.append(r.diff().rstrip("\n"))
    if not results:
        lines.append("no examples to run")
    lines.append(f"{plural(len(results) - len(bad), 'example')} ok, {len(bad)} failing")
    data = [{"case": r.case.id, "ok": r.ok, "problem": r.problem} for r in results]
    return Outcome("\n".join(lines), data, 1 if bad or not results else 0)


def rules_docs(settings: Settings) -> Outcome:
    from ..rules.docs import table
    from ..rules.loader import load_pack

    return Outcome(table(load_pack(settings.rules).rules))

"""`rules list|check|test|docs`: the rule files themselves."""

from __future__ import annotations

from collections.abc import Sequence

from ..settings import Settings
from .context import Outcome


def rules_list(settings: Settings) -> Outcome:
    from ..report.rules import listing
    from ..rules.loader import load_pack

    pack = load_pack(settings.rules)
    data = [
        {"id": r.id, "since": str(r.since), "calls": list(r.calls), "operations": list(r.operations),
         "why": r.why, "file": r.path, "line": r.line}
        for r in pack.rules
    ]
    return Outcome(listing(list(pack.rules)), data)


def rules_check(settings: Settings, paths: Sequence[str]) -> Outcome:
    from ..report.rules import checked
    from ..rules.loader import load_pack

    pack = load_pack([*settings.rules, *paths], bundled=not paths)
    return Outcome(checked(len(pack.rules), len(pack.sources)),
                   {"rules": len(pack.rules), "files": list(pack.sources)})


def rules_test(settings: Settings, paths: Sequence[str]) -> Outcome:
    from ..report.rules import tested
    from ..rules.loader import load_pack
    from ..rules.testing import cases, run_case

    pack = load_pack([*settings.rules, *paths], bundled=not paths)
    results = [run_case(c) for c in cases(pack.rules)]
    data = [{"case": r.case.id, "ok": r.ok, "problem": r.problem} for r in results]
    return Outcome(tested(results), data, 1 if not results or not all(r.ok for r in results) else 0)


def rules_docs(settings: Settings) -> Outcome:
    from ..report.rules import table
    from ..rules.loader import load_pack

    return Outcome(table(load_pack(settings.rules).rules))

"""`rules list|check|test|docs`: the rule files themselves."""

from __future__ import annotations

from ..options import RulesOptions
from ..settings import NoOptions
from .context import Context, Outcome


def rules_list(ctx: Context, opts: NoOptions) -> Outcome:
    """Every loaded rule: id, since, operations, target (opt-in ones too, their option named)."""
    from ..report.rules import listing

    pack = ctx.rules.listed
    data = [
        {"id": r.id, "since": str(r.since), "calls": list(r.calls), "operations": list(r.operations),
         "why": r.why, "file": r.path, "line": r.line, "option": r.option}
        for r in pack.rules
    ]
    return Outcome(listing(list(pack.rules)), data)


def rules_check(ctx: Context, opts: RulesOptions) -> Outcome:
    """Load the rule files (`opts.paths`, else the bundled ones and --rules); the first error raises."""
    from ..report.rules import checked
    from ..rules.loader import load_pack

    pack = load_pack([*ctx.settings.rules, *opts.paths], bundled=not opts.paths)
    return Outcome(checked(len(pack.rules), len(pack.sources)),
                   {"rules": len(pack.rules), "files": list(pack.sources)})


def rules_test(ctx: Context, opts: RulesOptions) -> Outcome:
    """Run every example and unchanged case of the rule files; exit 1 on a failure or none."""
    from ..report.rules import tested
    from ..rules.loader import load_pack
    from ..rules.testing import cases, run_case

    pack = load_pack([*ctx.settings.rules, *opts.paths], bundled=not opts.paths)
    results = [run_case(c) for c in cases(pack.rules)]
    data = [{"case": r.case.id, "ok": r.ok, "problem": r.problem} for r in results]
    return Outcome(tested(results), data, 1 if not results or not all(r.ok for r in results) else 0)


def rules_docs(ctx: Context, opts: NoOptions) -> Outcome:
    """The rules as the README's Markdown table (--json: its rows)."""
    from ..report.rules import rows, table

    rules = ctx.rules.listed.rules
    return Outcome(table(rules), rows(rules))

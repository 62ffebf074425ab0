"""Rule operations compiled to call rewrites: the one shape YAML rules and codemods share.

A rewrite is ``rewrite(call: libcst.Call, site: CallSite) -> libcst.Call``. It returns the call
unchanged when there is nothing to do, and raises ``NeedsHuman`` where the outcome would be a
guess (a splat, a positional argument it cannot name). A codemod in ``codemods/NAME.py`` defines
a function ``rewrite`` of this same shape.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import libcst as cst

from . import _args
from .rules import PLACEHOLDER_RE, Rule


class NeedsHuman(Exception):
    """The site cannot be rewritten with certainty: report it, change nothing."""


@dataclass
class CallSite:
    """What a rewrite knows about the call it is given."""

    rule: Rule
    callee: str  # the qualified name the call resolved to
    path: str
    line: int
    signature: Any = None  # the installed vLLM's Signature, when a source knows it
    notes: list[str] = field(default_factory=list)  # why parts were skipped ("not needed ...")
    edits: list[str] = field(default_factory=list)
    imports_to_add: list[tuple[str, str]] = field(default_factory=list)
    imports_to_remove: list[tuple[str, str]] = field(default_factory=list)

    @property
    def guarded(self) -> bool:
        return self.signature is not None

    @property
    def short_callee(self) -> str:
        return self.callee.rsplit(".", 1)[1]

    def arg_names(self, call: cst.Call) -> list[str | None]:
        """The parameter each argument binds to: keywords by name, positionals via the old signature."""
        if any(a.star for a in call.args):
            raise NeedsHuman("*args/**kwargs at the call: cannot tell which arguments it passes")
        sig = self.rule.signature
        names: list[str | None] = []
        position = 0
        for arg in call.args:
            if arg.keyword is not None:
                names.append(arg.keyword.value)
                continue
            if sig is not None and position < len(sig.positional):
                names.append(sig.positional[position])
            else:
                names.append(None)
            position += 1
        return names


Rewrite = Callable[[cst.Call, CallSite], cst.Call]


def _unnamed_reason(site: CallSite) -> str:
    if site.rule.signature is None:
        return "positional arguments at the call and no old 'signature' in the rule to name them"
    return f"more positional arguments than the old signature {site.rule.signature.text} names"


def _drop(name: str) -> Rewrite:
    def rewrite(call: cst.Call, site: CallSite) -> cst.Call:
        sig = site.signature
        if sig is not None and sig.accepts(name):
            site.notes.append(f"not needed for this vLLM: {site.short_callee} still takes {name}")
            return call
        names = site.arg_names(call)
        if name not in names:
            if None in names:
                raise NeedsHuman(f"cannot tell whether {name} is passed: {_unnamed_reason(site)}")
            return call
        index = names.index(name)
        args = list(call.args)
        if not _repeatable(args[index].value):
            # The value would vanish with the argument: a call in it would no longer run.
            raise NeedsHuman(f"dropping {name} would also drop the expression it passes, which may have side effects")
        if args[index].keyword is None:
            # Dropping a positional shifts the ones after it: pass those by name instead.
            for later in range(index + 1, len(args)):
                if args[later].keyword is None:
                    later_name = names[later]
                    if later_name is None:
                        raise NeedsHuman(f"dropping positional {name} shifts an argument: {_unnamed_reason(site)}")
                    sig = site.rule.signature
                    if sig is not None and later_name in sig.positional_only:
                        raise NeedsHuman(f"dropping positional {name} shifts {later_name}, which is positional-only")
                    args[later] = _args.as_keyword(args[later], later_name)
            call = call.with_changes(args=args)
        site.edits.append(f"drop {name}")
        return _args.remove_arg(call, index)

    return rewrite


_SAFE_TO_REPEAT = (cst.Name, cst.Attribute, cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString)


def _substitute(template: str, call: cst.Call, names: list[str | None], site: CallSite) -> cst.BaseExpression:
    module = cst.Module(body=[])
    pieces: dict[str, str] = {}
    for placeholder in PLACEHOLDER_RE.findall(template):
        if placeholder not in names:
            raise NeedsHuman(f"argument {placeholder} is not passed at this call, so {{{placeholder}}} has no value")
        value = call.args[names.index(placeholder)].value
        if not _repeatable(value):
            # Copying `make_config()` would call it twice: a human must bind it to a name first.
            raise NeedsHuman(f"{{{placeholder}}} is bound to an expression that may have side effects")
        code = module.code_for_node(value)
        # A literal in an attribute chain needs parentheses: `(1).real`, not `1.real`.
        pieces[placeholder] = code if isinstance(value, (cst.Name, cst.Attribute)) else f"({code})"
    code = PLACEHOLDER_RE.sub(lambda m: pieces[m.group(1)], template)
    try:
        return cst.parse_expression(code)
    except cst.ParserSyntaxError:
        raise NeedsHuman(f"the 'add' expression does not parse with this call's values: {code!r}") from None


def _repeatable(value: cst.BaseExpression) -> bool:
    """A value that can be copied or dropped without changing what runs: names, dotted names, literals."""
    if isinstance(value, cst.Attribute):
        return _is_dotted(value)
    return isinstance(value, _SAFE_TO_REPEAT)


def _is_dotted(node: cst.BaseExpression) -> bool:
    while isinstance(node, cst.Attribute):
        node = node.value
    return isinstance(node, cst.Name)


def _add(name: str, template: str) -> Rewrite:
    def rewrite(call: cst.Call, site: CallSite) -> cst.Call:
        sig = site.signature
        if sig is not None and not sig.accepts(name):
            site.notes.append(f"not needed for this vLLM: {site.short_callee} does not take {name}")
            return call
        names = site.arg_names(call)
        if name in names:
            return call
        if None in names:
            raise NeedsHuman(f"cannot tell whether {name} is passed already: {_unnamed_reason(site)}")
        value = _substitute(template, call, names, site)
        site.edits.append(f"add {name}")
        return _args.append_arg(call, _args.keyword_arg(name, value))

    return rewrite


def _rename(old: str, new: str) -> Rewrite:
    def rewrite(call: cst.Call, site: CallSite) -> cst.Call:
        sig = site.signature
        if sig is not None and (sig.accepts(old) or not sig.accepts(new)):
            why = f"still takes {old}" if sig.accepts(old) else f"does not take {new}"
            site.notes.append(f"not needed for this vLLM: {site.short_callee} {why}")
            return call
        names = site.arg_names(call)
        if new in names or old not in names:
            # Passed positionally, a renamed parameter still binds: only keywords need the new name.
            return call
        index = names.index(old)
        args = list(call.args)
        if args[index].keyword is None:
            return call
        args[index] = args[index].with_changes(keyword=cst.Name(new))
        site.edits.append(f"rename {old} to {new}")
        return call.with_changes(args=args)

    return rewrite


def _move(target: str) -> Rewrite:
    module, _, name = target.rpartition(".")

    def rewrite(call: cst.Call, site: CallSite) -> cst.Call:
        # The engine drops the old import (any form: alias, `import a.b`, `from a import b`)
        # when the callee expression is replaced and the import is left unused.
        site.imports_to_add.append((module, name))
        site.edits.append(f"move to {target}")
        return call.with_changes(func=cst.Name(name))

    return rewrite


def _notice(message: str, missing: tuple[str, ...]) -> Rewrite:
    def rewrite(call: cst.Call, site: CallSite) -> cst.Call:
        passed = {a.keyword.value for a in call.args if a.keyword is not None}
        if missing and not any(a.star for a in call.args) and set(missing) <= passed:
            site.notes.append(f"not needed: {site.short_callee}(...) passes {', '.join(missing)}")
            return call
        sig = site.signature
        if sig is not None:
            # Guarded, a notice speaks only of a call that does not bind as it stands.
            bound = sig.bind(
                sum(1 for a in call.args if a.keyword is None and not a.star),
                [a.keyword.value for a in call.args if a.keyword is not None],
                star_args=any(a.star == "*" for a in call.args),
                star_kwargs=any(a.star == "**" for a in call.args),
            )
            if bound.status == "ok":
                site.notes.append(f"not needed for this vLLM: {site.short_callee}(...) binds as it is")
                return call
        site.notes.append(f"notice: {message}")
        return call

    return rewrite


def load_codemod(path: str, rule_id: str) -> Rewrite:
    spec = importlib.util.spec_from_file_location(f"vsp_codemod_{rule_id.replace('-', '_')}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load codemod {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rewrite = getattr(module, "rewrite", None)
    if not callable(rewrite):
        raise ImportError(f"codemod {path} defines no function rewrite(call, site)")
    return rewrite  # type: ignore[no-any-return]


def compile_rule(rule: Rule) -> list[Rewrite]:
    """The rewrites of one rule, in a fixed order: argument edits first, then the callee's name."""
    rewrites: list[Rewrite] = []
    rewrites += [_rename(old, new) for old, new in rule.rename]
    rewrites += [_drop(name) for name in rule.drop]
    rewrites += [_add(name, expr) for name, expr in rule.add]
    if rule.codemod_path:
        rewrites.append(load_codemod(rule.codemod_path, rule.id))
    if rule.move:
        rewrites.append(_move(rule.move))
    if rule.notice:
        rewrites.append(_notice(rule.notice, rule.missing))
    return rewrites

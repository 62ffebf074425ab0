"""The libcst engine: match calls by qualified name, apply every rule in one pass per file.

Per-file results never raise: ``changed | unchanged | skipped (reason) | failed (error)``; the
caller fails closed on any failed file.
"""

from __future__ import annotations

import ast
import contextlib
import re
import sys
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import libcst as cst
from libcst.helpers import get_full_name_for_node
from libcst.metadata import (
    MetadataWrapper,
    PositionProvider,
    QualifiedName,
    QualifiedNameProvider,
    QualifiedNameSource,
)

from .rule import requirement_fact
from ..kinds import Action, FileStatus
from .context import CallSite, NeedsHuman, Rewrite
from .results import FileResult, Site
from .names import import_names
from .ops import compile_rule, guardable, observes_only
from .positions import LazyPositions, code as code_of, positions
from .scoped import (
    ImportDrop,
    Scope,
    line_map,
    module_of,
    names_import,
    parse_source,
    remove_imports,
    time_limit,
    unreferenced,
)

if TYPE_CHECKING:
    from .rule import Rule


CODEMOD_SECONDS = 10.0  # the default CPU-time limit of a scoped transform of one file; the real ones take milliseconds


@dataclass
class Engine:
    """Compiled rules plus what decides them: the target version and, when known, signatures."""

    rules: Sequence[Rule]
    version: Any = None  # packaging Version; None: every rule is a candidate (rule examples)
    signatures: Mapping[str, Any] | None = None  # qualname → Signature | None
    declined: frozenset[tuple[str, int, str]] = frozenset()  # (path, line, rule id) a reviewer said no to
    facts: Mapping[str, bool | None] | None = None  # vllm.x.C.attr → defined? (scoped rules' guards)
    # Compile a rewritten file with the tool's own Python: only where no target exists (a rule's
    # examples). A plan for a target leaves it to the target's grammar (rewrite/grammar.py).
    compile_here: bool = True
    # The wall-clock limit of one scoped transform of one file (a codemod that loops must not hang
    # the run); None: no limit (a test comparing two ways of running the same transforms, where a
    # loaded machine must not decide the outcome).
    codemod_seconds: float | None = CODEMOD_SECONDS
    # Skip the work that cannot change a file: a file is parsed for the call rules only where it
    # names a rule's package and, as a word, one of its callables (`mentions`), and not at all
    # where no call can match and none of its regions' rules applies. False: every file parsed,
    # every call looked at (the full plan the prefiltered one is tested equal to).
    prefilter: bool = True
    _index: dict[str, list[tuple[Rule, list[Rewrite]]]] = field(init=False, default_factory=dict)
    _scoped: list[tuple[Rule, Scope, list[Any]]] = field(init=False, default_factory=list)
    _needles: dict[bytes, re.Pattern[bytes]] = field(init=False, default_factory=dict)
    _packages: frozenset[str] = field(init=False, default=frozenset())

    def __post_init__(self) -> None:
        shorts: dict[bytes, set[str]] = {}
        for rule in self.rules:
            rewrites = compile_rule(rule)
            if rule.scope is not None:
                self._scoped.append((rule, Scope.parse(rule.scope), rewrites))
            for call in rule.calls:
                self._index.setdefault(call, []).append((rule, rewrites))
                top, _, rest = call.partition(".")
                shorts.setdefault(top.encode(), set()).add(rest.rsplit(".", 1)[-1])
        self._needles = {
            top: re.compile(rb"\b(?:" + b"|".join(sorted(re.escape(n).encode() for n in names)) + rb")\b")
            for top, names in shorts.items()
        }
        self._packages = frozenset(top.decode() for top in shorts)

    def mentions(self, data: bytes) -> bool:
        """Prefilter: a file is parsed only if it names a rule's package and, as a word, its callable.

        An import of the package is the only way a call can resolve to it, so a file without the
        package's name cannot match (`LRScheduler` does not mention `vllm` nor the word `Scheduler`).
        """
        return any(top in data and pattern.search(data) for top, pattern in self._needles.items())

    def weight(self, data: bytes, path: str) -> int:
        """An estimate of the libcst work `transform` does on the file (0: none), to share files
        between processes (rewrite/parallel.py): its size, once for the call pass and once more
        for each region's rule of its module (whether it applies is decided later)."""
        module_name = module_of(path)
        scoped = sum(1 for e in self._scoped if module_name is None or e[1].module == module_name)
        calls = self.mentions(data) if self.prefilter else True
        return len(data) * (int(calls) + scoped)

    def transform(self, data: bytes, path: str = "<string>") -> FileResult:
        # What a codemod prints goes to stderr: stdout is the diff or the JSON a script reads.
        with contextlib.redirect_stdout(sys.stderr):
            return self._transform(data, path)

    def _transform(self, data: bytes, path: str) -> FileResult:
        module_name = module_of(path)
        # A rule example (no module) is the region's own module.
        scoped = [e for e in self._scoped if module_name is None or e[1].module == module_name]
        calls = self.mentions(data) if self.prefilter else True
        if not scoped and not calls:
            return FileResult(path, FileStatus.UNCHANGED, data, data)
        scoped_pass = _ScopedPass(self, path, data)
        if self.prefilter and not calls and scoped_pass.none_apply(scoped):
            # No call can match and no region's rule applies to this vLLM: each says "not needed"
            # at its region's line, read with `ast`, as the full pass would (no libcst at all).
            return FileResult(path, FileStatus.UNCHANGED, data, data, tuple(scoped_pass.not_needed(scoped)))
        try:
            module = cst.parse_module(data)
        except cst.ParserSyntaxError as exc:
            return FileResult(path, FileStatus.SKIPPED, data, data, reason=_syntax_error(data, path, exc))
        except (UnicodeDecodeError, SyntaxError, LookupError) as exc:
            return FileResult(path, FileStatus.SKIPPED, data, data, reason=f"cannot decode: {exc}")
        except (RecursionError, MemoryError):
            return FileResult(path, FileStatus.SKIPPED, data, data, reason=_TOO_DEEP)
        wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
        command = _CallRewriter(self, path, wrapper)
        try:
            # The call pass needs qualified names, the costliest metadata: only where a call may
            # match, and from the imports alone where they decide (rewrite/names.py).
            if calls:
                names = import_names(data, self._packages)
                command.qualified = names if names is not None else _provider_names(wrapper)
                new_module = module.visit(command)
            else:
                new_module = module
            if command.context is not None:
                # Only a changed callee (a move, or a codemod) edits imports: pay for libcst.codemod then.
                from libcst.codemod.visitors import AddImportsVisitor, RemoveImportsVisitor

                new_module = AddImportsVisitor(command.context).transform_module(new_module)
                new_module = RemoveImportsVisitor(command.context).transform_module(new_module)
            if command.retarget:
                new_module = new_module.visit(_RetargetImports(command.retarget))
            if scoped:
                new_module = scoped_pass.run(new_module, scoped)
            after = new_module.bytes
            if after != data and self.compile_here:
                compile(after, path, "exec", dont_inherit=True)
        except _ScopedFailure as exc:
            return FileResult(path, FileStatus.FAILED, data, data, tuple(command.sites), str(exc))
        except SyntaxError as exc:
            return FileResult(path, FileStatus.FAILED, data, data, tuple(command.sites), f"result does not compile: {exc}")
        except RecursionError:
            # libcst's visitors recurse per node: a generated expression thousands deep stops them.
            return FileResult(path, FileStatus.SKIPPED, data, data, reason=_TOO_DEEP)
        except (Exception, SystemExit) as exc:  # a codemod's bug must not take the other files down (nor exit 0)
            return FileResult(path, FileStatus.FAILED, data, data, tuple(command.sites), _failure(exc))
        sites = (*command.sites, *scoped_pass.sites)
        status = FileStatus.CHANGED if after != data else FileStatus.UNCHANGED
        return FileResult(path, status, data, after, sites)

    def transform_file(self, root: Path, relpath: str) -> FileResult:
        try:
            data = (root / relpath).read_bytes()
        except OSError as exc:
            return FileResult(relpath, FileStatus.SKIPPED, reason=f"cannot read: {exc.strerror}")
        return self.transform(data, relpath)

    def run(self, root: Path, relpaths: Iterable[str]) -> list[FileResult]:
        return [self.transform_file(root, p) for p in relpaths]


def _provider_names(wrapper: MetadataWrapper) -> Callable[[cst.BaseExpression], Collection[QualifiedName]]:
    """libcst's own answer: every scope of the module analysed."""
    found = wrapper.resolve(QualifiedNameProvider)

    def names(func: cst.BaseExpression) -> Collection[QualifiedName]:
        value = found.get(func, set())
        return value() if callable(value) else value  # libcst computes each node's names lazily

    return names


class _CallRewriter(cst.CSTTransformer):
    """Visited without a MetadataWrapper: names come from `qualified`, positions (needed only
    where a call matches) are computed on first use."""

    def __init__(self, engine: Engine, path: str, wrapper: MetadataWrapper):
        super().__init__()
        self.engine = engine
        self.path = path
        self.wrapper = wrapper
        self.qualified: Callable[[cst.BaseExpression], Collection[QualifiedName]] = lambda func: set()
        self._positions: Any = None
        self.context: Any = None  # a libcst CodemodContext, made only when imports must change
        self.sites: list[Site] = []
        # (old module, name) -> new module: imports of a name moved under the same name.
        self.retarget: dict[tuple[str, str], str] = {}

    def _import_context(self) -> Any:
        if self.context is None:
            from libcst.codemod import CodemodContext

            self.context = CodemodContext(filename=self.path, wrapper=self.wrapper)
        return self.context

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        names = self.qualified(original_node.func)
        index = self.engine._index
        imported = {q for q in names if q.source is QualifiedNameSource.IMPORT and q.name in index}
        if not imported:
            return updated_node
        callee = min(q.name for q in imported)
        if self._positions is None:
            self._positions = positions(self.wrapper.module)
        span = self._positions[original_node]
        line, self._end_line = span.start.line, span.end.line
        signatures = self.engine.signatures
        signature = signatures.get(callee) if signatures is not None else None
        guards, candidates = self._candidates(callee, line, signature)
        others = sorted(
            q.name if q.source is QualifiedNameSource.IMPORT else f"a local {q.name}"
            for q in names
            if q not in imported
        )
        if others:
            # The name is bound more than once in its scope (`X = other` beside the import, a
            # try/except import): which callable this call reaches is a guess, so do not make it.
            code = cst.Module(body=[]).code_for_node(original_node.func)
            message = f"{code} may be {callee} or {' or '.join(others)} here: cannot tell which one is called"
            for rule, _ in candidates:
                self._record(CallSite(rule, callee, self.path, line, signature), Action.NEEDS_HUMAN, message)
            return updated_node
        call, added = self._rewrite(updated_node, candidates, guards, callee, line, signature)
        self._fix_imports(original_node, call, callee, added)
        return call

    def _candidates(self, callee: str, line: int, signature: Any) -> tuple[dict[str, Any], list[Any]]:
        """The call's rules that may apply here, and each guarded rule's decision; the rules the
        installed vLLM refuses and those declined in review recorded as such."""
        index, version = self.engine._index, self.engine.version
        # A call rule's own guard (a `move`: the old module lacks the name, the new one has it)
        # decides where the installed vLLM can tell; a refusal is recorded, not silently skipped.
        guards = {rule.id: guard_decision(rule, self.engine) for rule, _ in index[callee] if rule.guard}
        for rule, _ in index[callee]:
            known, why = guards.get(rule.id, (None, ""))
            if known is False:
                self._record(CallSite(rule, callee, self.path, line, signature, guard_known=True),
                             Action.NOT_NEEDED, why)
        candidates = [
            (rule, rewrites)
            for rule, rewrites in sorted(index[callee], key=_notices_last)
            if guards.get(rule.id, (None, ""))[0] is not False
            # A signature decides only for operations that consult it; otherwise (unguarded, a
            # move, a codemod) a rule for a later vLLM than the target does not apply.
            and (guards.get(rule.id, (None, ""))[0] is True or version is None or rule.since <= version
                 or (signature is not None and guardable(rule)))
        ]
        for rule, _ in candidates:
            if (self.path, line, rule.id) in self.engine.declined:
                self._record(CallSite(rule, callee, self.path, line, signature), Action.DECLINED, "declined in review")
        candidates = [(r, rw) for r, rw in candidates if (self.path, line, r.id) not in self.engine.declined]
        return guards, candidates

    def _rewrite(self, call: cst.Call, candidates: list[Any], guards: dict[str, Any], callee: str, line: int,
                 signature: Any) -> tuple[cst.Call, list[tuple[str, str]]]:
        """Each candidate rule's rewrites applied in turn, its site recorded; the imports they add."""
        added: list[tuple[str, str]] = []
        for rule, rewrites in candidates:
            site = CallSite(rule, callee, self.path, line, signature,
                            guard_known=guards.get(rule.id, (None, ""))[0] is True)
            try:
                new = call
                for rewrite in rewrites:
                    new = rewrite(new, site)
            except NeedsHuman as exc:
                self._record(site, Action.NEEDS_HUMAN, str(exc))
                continue
            added += site.imports_to_add
            if site.imports_to_remove:
                from libcst.codemod.visitors import RemoveImportsVisitor

                for module, obj in site.imports_to_remove:
                    RemoveImportsVisitor.remove_unused_import(self._import_context(), module, obj)
            if site.edits:
                self._record(site, Action.EDITED, "; ".join(site.edits + site.notes))
            elif site.notices:
                self._record(site, Action.NOTICE, "; ".join(site.notices))
            elif site.notes:
                self._record(site, Action.NOT_NEEDED, "; ".join(site.notes))
            else:
                self._record(site, Action.ALREADY, "nothing to change")
            call = new
        return call, added

    def _fix_imports(self, original_node: cst.Call, call: cst.Call, callee: str, added: list[tuple[str, str]]) -> None:
        """The imports the rewrites need added (or an import retargeted where the name moved), and
        the old callee's import dropped where the callee itself was replaced."""
        same = call.func.deep_equals(original_node.func)
        old_module = callee.rpartition(".")[0]
        for module, obj in added:
            if same and isinstance(call.func, cst.Name) and obj == call.func.value and module != old_module:
                # Moved under the same name: the import that binds it is pointed at the new module
                # where it stands (its scope and order kept); a new one beside it would leave the
                # old import running, and failing where its module no longer has the name.
                self.retarget[(old_module, obj)] = module
                continue
            from libcst.codemod.visitors import AddImportsVisitor

            AddImportsVisitor.add_needed_import(self._import_context(), module, obj)
        if not same:
            # The callee itself was replaced (move): drop the import that named it, if now unused.
            from libcst.codemod.visitors import RemoveImportsVisitor

            RemoveImportsVisitor.remove_unused_import_by_node(self._import_context(), original_node.func)

    def _record(self, site: CallSite, action: Action, message: str) -> None:
        self.sites.append(
            Site(site.rule.id, self.path, site.line, self._end_line, site.callee, action, message, site.guarded,
                 tuple(site.moves))
        )


class _RetargetImports(cst.CSTTransformer):
    """Point every `from old import name` of the file that binds `name` as itself at the module the
    name moved to, for each ((old, name), new), where it stands: a function's own import stays
    in the function, a class body's in the class. Other names of the same statement keep their
    module (the statement is split, on a line of its own where it had one)."""

    def __init__(self, moves: dict[tuple[str, str], str]):
        super().__init__()
        self.moves = moves

    def leave_ImportFrom(self, original_node: cst.ImportFrom, updated_node: cst.ImportFrom
                         ) -> cst.ImportFrom | cst.FlattenSentinel[cst.BaseSmallStatement]:
        if updated_node.relative or updated_node.module is None or isinstance(updated_node.names, cst.ImportStar):
            return updated_node
        module = get_full_name_for_node(updated_node.module)
        stay: list[cst.ImportAlias] = []
        moved: dict[str, list[cst.ImportAlias]] = {}
        # In parentheses each name keeps its own line (its comma holds the line break), and the
        # last of each statement takes the comma that ended the original list (the break before `)`).
        layout = updated_node.rpar is not None
        for alias in updated_node.names:
            bound = alias.evaluated_alias
            new = (self.moves.get((module, alias.evaluated_name))
                   if module is not None and bound in (None, alias.evaluated_name) else None)
            if new is None:
                stay.append(alias)
            else:
                moved.setdefault(new, []).append(alias if layout else alias.with_changes(comma=cst.MaybeSentinel.DEFAULT))
        if not moved:
            return updated_node
        if not stay and len(moved) == 1:
            return updated_node.with_changes(module=_dotted(next(iter(moved))))  # its layout kept
        closing = updated_node.names[-1].comma
        if layout and stay:
            stay[-1] = stay[-1].with_changes(comma=closing)
        # One name moved is one short line; several keep the parenthesised layout, a name a line.
        made = [updated_node.with_changes(module=_dotted(new), names=[*names[:-1], names[-1].with_changes(comma=closing)])
                if layout and len(names) > 1 else
                cst.ImportFrom(module=_dotted(new), names=[n.with_changes(comma=cst.MaybeSentinel.DEFAULT) for n in names])
                for new, names in moved.items()]
        if not stay:
            first, *rest = made
            first = updated_node.with_changes(module=first.module, names=first.names, lpar=None, rpar=None)
            return cst.FlattenSentinel([first, *rest])
        if updated_node.rpar is None:  # `from m import a, b` takes no trailing comma outside parentheses
            stay[-1] = stay[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        return cst.FlattenSentinel([updated_node.with_changes(names=stay), *made])

    def leave_SimpleStatementLine(self, original_node: cst.SimpleStatementLine,
                                  updated_node: cst.SimpleStatementLine
                                  ) -> cst.SimpleStatementLine | cst.FlattenSentinel[cst.SimpleStatementLine]:
        if len(original_node.body) > 1 or len(updated_node.body) == 1:
            return updated_node  # untouched, or a line of `a; b` already: it stays one line
        # An import this pass split: one statement per line, as the line had one.
        lines = [updated_node.with_changes(body=[updated_node.body[0]])]
        return cst.FlattenSentinel([*lines, *(cst.SimpleStatementLine([part]) for part in updated_node.body[1:])])


def _dotted(name: str) -> cst.Attribute | cst.Name:
    node: cst.Attribute | cst.Name = cst.Name(name.split(".")[0])
    for part in name.split(".")[1:]:
        node = cst.Attribute(value=node, attr=cst.Name(part))
    return node


_TOO_DEEP = "nested too deeply to rewrite (a generated expression?): its calls were not checked"


def _syntax_error(data: bytes, path: str, exc: cst.ParserSyntaxError) -> str:
    """Python's own account of the error (libcst's native parser can name the wrong line)."""
    try:
        compile(data, path, "exec", dont_inherit=True)
    except SyntaxError as err:
        return f"syntax error at line {err.lineno}: {err.msg}"
    except ValueError as err:  # null bytes (Python < 3.12)
        return f"syntax error: {err}"
    return f"syntax error at line {exc.raw_line}: {exc.message}"


def _notices_last(entry: tuple[Rule, list[Rewrite]]) -> bool:
    """A notice judges the call as the other rules leave it, so it runs after them."""
    return observes_only(entry[0])


def guard_decision(rule: Rule, engine: Engine) -> tuple[bool | None, str]:
    """What the rule's guard says of the installed vLLM: (True, "") act, (False, why not) not
    needed, (None, "") it cannot tell (no guard, or a fact unknown: `since` decides then)."""
    guard = rule.guard
    facts = engine.facts or {}
    signatures = engine.signatures or {}
    reasons = dict(guard.reasons)
    answers: list[tuple[bool | None, str]] = []
    for name in guard.defines:
        owner, _, attr = name.rpartition(".")
        answers.append((facts.get(name), reasons.get(name, f"{owner.rsplit('.', 1)[-1]} does not define {attr}")))
    for name in guard.lacks:
        known = facts.get(name)
        owner, _, attr = name.rpartition(".")
        answers.append((None if known is None else not known,
                        reasons.get(name, f"{owner.rsplit('.', 1)[-1]} still defines {attr}")))
    for callee, param in guard.accepts:
        sig = signatures.get(callee)
        answers.append((None if sig is None else sig.takes(param),
                        f"{callee.rsplit('.', 1)[-1]} does not take {param}"))
    installed: list[tuple[bool | None, str]] = []
    for dist, spec in guard.requires:
        installed.append((facts.get(requirement_fact(dist, spec)), f"the installed {dist} is not {spec}"))
    refused = [why for known, why in answers if known is False]
    if refused:
        return False, f"not needed for this vLLM: {refused[0]}"
    refused = [why for known, why in installed if known is False]
    if refused:
        return False, f"not needed: {refused[0]}"
    answers += installed
    if answers and all(known for known, _ in answers):
        return True, ""
    return None, ""


class _ScopedPass:
    """The scoped rules of one file, run one after the other on the module the call pass left."""

    def __init__(self, engine: Engine, path: str, original: bytes):
        self.engine = engine
        self.path = path
        self.original = original
        self._placed: list[Site | None] = []  # None: the place of an import drop's edit, until it is known
        # (rule, scope, guarded, the drop with its lines in the original, its place, what dropped it)
        self._drops: list[tuple[Rule, Scope, bool, ImportDrop, int, str]] = []
        # A module-level function of this module an edit left unbound, and which rule did.
        self._unbound: dict[str, str] = {}

    @property
    def sites(self) -> list[Site]:
        return [s for s in self._placed if s is not None]

    @cached_property
    def _tree(self) -> ast.Module | None:
        """The original module read once with `ast`, for the lines of the regions' definitions."""
        return parse_source(self.original)

    def decide(self, rule: Rule) -> tuple[bool, bool, str]:
        """(apply, guarded, why not): a known guard decides; otherwise `since` does."""
        engine = self.engine
        known, why = guard_decision(rule, engine)
        if known is not None:
            return known, True, why
        if engine.version is None or rule.since <= engine.version:
            return True, False, ""
        return False, False, f"not needed before vLLM {rule.since}"

    def none_apply(self, entries: list[tuple[Rule, Scope, list[Any]]]) -> bool:
        """No rule of `entries` applies, and the original parses (the regions' lines are known)."""
        return all(not self.decide(rule)[0] for rule, _, _ in entries) and self._tree is not None

    def not_needed(self, entries: list[tuple[Rule, Scope, list[Any]]]) -> list[Site]:
        """The sites of `entries` when none applies (`none_apply`): what `run` records for them."""
        for rule, scope, _ in entries:
            self._not_needed(rule, scope)
        return self.sites

    def _not_needed(self, rule: Rule, scope: Scope) -> bool:
        """Record the rule as not needed at its region's line, if so; whether it was."""
        apply, guarded, why = self.decide(rule)
        if apply:
            return False
        line = scope.def_line(self._tree)
        if line is not None:
            self._site(rule, scope, line, line, Action.NOT_NEEDED, why, guarded)
        return True

    def run(self, module: cst.Module, entries: list[tuple[Rule, Scope, list[Any]]]) -> cst.Module:
        for rule, scope, transforms in entries:
            if self._not_needed(rule, scope):
                continue
            guarded = self.decide(rule)[1]
            unbound = self._unbound.get(scope.inner[0]) if scope.inner else None
            for factory in transforms:
                module = self._one(rule, scope, factory, module, guarded, unbound)
        return self._drop_imports(module)

    def _drop_imports(self, module: cst.Module) -> cst.Module:
        """The imports the file's transforms no longer need, dropped in one RemoveImportsVisitor pass
        (its scope analysis of the whole module is the costliest step: once per file, not once per
        codemod); each import statement that goes is an edit of the rule that dropped it, in the
        place among the sites its transform's edits had."""
        if not self._drops:
            return module
        first, *_, label = self._drops[0]
        try:
            with time_limit(self.engine.codemod_seconds):
                result = remove_imports(module, [drop for _, _, _, drop, _, _ in self._drops],
                                        shortcut=self.engine.prefilter)
        except (Exception, SystemExit) as exc:
            raise _ScopedFailure(f"rule {first.id}: {label} {_failure(exc)}") from exc
        for rule, scope, guarded, drop, at, _ in self._drops:
            if drop.lines is not None and not any(names_import(s, drop.module, drop.obj) for s in result.body):
                a, b = drop.lines
                self._placed[at] = Site(rule.id, self.path, a, b, str(scope), Action.EDITED, drop.what, guarded)
        return result

    def _one(self, rule: Rule, scope: Scope, factory: Any, module: cst.Module, guarded: bool,
             unbound: str | None = None) -> cst.Module:
        """Run one transform of `rule` on `module`; its sites recorded. `unbound`: the rule that
        left the region's function unbound (`ScopedTransform.unbinds`): what the transform would
        change there is reported as not needed, and not written."""
        transform = factory(rule, scope, module)
        transform.signatures = self.engine.signatures or {}
        transform.version = self.engine.version
        lazy = None
        try:
            with time_limit(self.engine.codemod_seconds):
                if transform.get_inherited_dependencies() <= {PositionProvider}:
                    # Positions only once an edit is recorded.
                    transform.metadata = lazy = LazyPositions(module)
                    new = module.visit(transform)
                else:  # a codemod asking for more metadata
                    # Nodes are immutable and the module is not used again: no defensive deep copy.
                    new = MetadataWrapper(module, unsafe_skip_copy=True).visit(transform)
        except (Exception, SystemExit) as exc:  # SystemExit too: a codemod must not end the run, let alone with 0
            raise _ScopedFailure(f"rule {rule.id}: {_label(rule, factory)} {_failure(exc)}") from exc
        if not transform.found:
            self._site(rule, scope, 1, 1, Action.NEEDS_HUMAN, f"{scope} is not in this file: the rule matches nothing",
                       guarded)
            return module
        if unbound is not None and (transform.edits or transform.human or transform.imports_to_drop):
            return self._dead(rule, scope, transform, lazy, module, guarded, unbound)
        if not transform.edits and not transform.human and transform.imports_to_drop:
            # Only an import to drop: whether it goes decides between edited and already, now.
            new = self._drop_now(transform, rule, factory, new)
        if not transform.edits and not transform.human:
            line = scope.def_line(self._tree) or 1
            self._site(rule, scope, line, line, Action.ALREADY, "nothing to change", guarded)
            self._note_unbound(rule, transform, new)  # unbound already (a patched file planned again)
            return new
        code = code_of(module)
        to_original = line_map(self.original.decode("utf-8", "surrogateescape"), code)
        edits = [(to_original(a), to_original(b), what) for a, b, what in transform.edits]
        starts = [a for a, _, _ in edits] + [to_original(d.lines[0]) for d in transform.imports_to_drop if d.lines]
        if any((self.path, a, rule.id) in self.engine.declined for a in starts):
            # Declined, the import drops included: each edit the rule would make is a declined site,
            # the imports it would drop among them (whether each goes is decided now, as it would be).
            if transform.imports_to_drop:
                self._drop_now(transform, rule, factory, new)
            for a, b, _ in transform.edits:
                self._site(rule, scope, to_original(a), to_original(b), Action.DECLINED, "declined in review", guarded)
            return module
        for a, b, what in edits:
            self._site(rule, scope, a, b, Action.EDITED, what, guarded)
        for drop in transform.imports_to_drop:  # its site (if the import goes) right after the edits
            lines = None if drop.lines is None else (to_original(drop.lines[0]), to_original(drop.lines[1]))
            self._drops.append((rule, scope, guarded, replace(drop, lines=lines), len(self._placed),
                                _label(rule, factory)))
            self._placed.append(None)
        for a, b, why in transform.human:
            self._site(rule, scope, to_original(a), to_original(b), Action.NEEDS_HUMAN, why, guarded)
        self._note_unbound(rule, transform, new)
        return new

    def _note_unbound(self, rule: Rule, transform: Any, module: cst.Module) -> None:
        """The functions the transform says its module leaves unbound, where nothing refers to them."""
        for name in transform.unbound:
            if name not in self._unbound and unreferenced(module, name):
                self._unbound[name] = rule.id

    def _dead(self, rule: Rule, scope: Scope, transform: Any, lazy: Any, module: cst.Module, guarded: bool,
              unbound: str) -> cst.Module:
        """The transform's edits and sites for a human in a function an earlier rule left unbound:
        each one a "not needed" site at its lines; `module` as it was."""
        code = code_of(module)
        to_original = line_map(self.original.decode("utf-8", "surrogateescape"), code)
        why = f"{unbound} leaves {scope.inner[0]} unbound and nothing in the module refers to it"
        for a, b, what in transform.edits:
            self._site(rule, scope, to_original(a), to_original(b), Action.NOT_NEEDED,
                       f"not needed: {why} (would {what})", guarded, by=unbound)
        for a, b, what in transform.human:
            self._site(rule, scope, to_original(a), to_original(b), Action.NOT_NEEDED,
                       f"not needed: {why} (would leave for a human: {what})", guarded, by=unbound)
        if not transform.edits and not transform.human:  # an import it would drop, alone
            line = scope.def_line(self._tree) or 1
            self._site(rule, scope, line, line, Action.NOT_NEEDED, f"not needed: {why}", guarded, by=unbound)
        return module

    def _drop_now(self, transform: Any, rule: Rule, factory: Any, module: cst.Module) -> cst.Module:
        drops, transform.imports_to_drop = transform.imports_to_drop, []
        try:
            with time_limit(self.engine.codemod_seconds):
                result = remove_imports(module, drops, shortcut=self.engine.prefilter)
        except (Exception, SystemExit) as exc:
            raise _ScopedFailure(f"rule {rule.id}: {_label(rule, factory)} {_failure(exc)}") from exc
        for drop in drops:
            if drop.lines is not None and not any(names_import(s, drop.module, drop.obj) for s in result.body):
                transform.edits.append((*drop.lines, drop.what))
        return result

    def _site(self, rule: Rule, scope: Scope, line: int, end: int, action: Action, message: str,
              guarded: bool, by: str = "") -> None:
        self._placed.append(Site(rule.id, self.path, line, end, str(scope), action, message, guarded, by=by))


def _label(rule: Rule, factory: Any) -> str:
    """What a failure names: the codemod, or the rule's operation."""
    name = factory.codemod_name
    return f"codemod {name!r}" if name else f"operation {rule.operations[0]!r}"


class _ScopedFailure(Exception):
    """A scoped transform broke on this file: the file fails, and the run with it."""


def _failure(exc: BaseException) -> str:
    if isinstance(exc, SystemExit):
        return f"calls SystemExit({exc.code!r}) (a codemod must not end the run)"
    return f"{type(exc).__name__}: {exc}"

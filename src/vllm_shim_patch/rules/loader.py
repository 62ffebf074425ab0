"""Rule files → frozen `Rule`s, every error naming file, line and rule id.

The generic keys (id, call, since, why, signature, examples, unchanged) are read here; each
operation reads its own keys (`rewrite.ops`), so a new operation needs no change in this file.
"""

from __future__ import annotations

import ast
import difflib
import errno
import os
import re
import stat
from collections.abc import Iterable
from importlib import resources
from pathlib import Path
from typing import Any

from ..errors import RuleError
from ..rewrite.ops import OPERATIONS
from ..rewrite.ops.base import QUALNAME_RE, is_identifier
from ..vllm_source import parse_scope
from ..rewrite.rule import DEFAULT_PACKAGE, SCHEMA_VERSION, Example, Guard, OldSignature, Rule, RulePack

GENERIC_KEYS = ("id", "call", "in", "guard", "since", "why", "signature", "examples", "unchanged", "option",
                "symptoms")
RULE_KEYS = (*GENERIC_KEYS, *(key for op in OPERATIONS.values() for key in op.keys))
TOP_KEYS = ("schema", "package", "rules")
_ID_RE = re.compile(r"[a-z0-9][a-z0-9-]*")
DISTRIBUTION_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")  # always fullmatch: `$` would let "id\\n" through
# Rule files are small hand-written text: a bound keeps a huge or generated file from stalling a run.
MAX_RULE_FILE_BYTES = 1 << 20
# C0 controls but tab, newline and carriage return, DEL, and C1 controls: never meant in a rule file.
_CONTROL_RE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
# Rule files are plain data: any other tag (``!!python/object:...``, ``!custom``) is refused.
_PLAIN_TAGS = frozenset(
    f"tag:yaml.org,2002:{t}" for t in ("str", "int", "float", "bool", "null", "seq", "map", "timestamp")
)


def bundled_rule_files() -> list[Path]:
    """The rule files shipped inside the wheel (top-level `rules/` in the source tree)."""
    root = resources.files("vllm_shim_patch.bundled_rules")
    return sorted(Path(str(p)) for p in root.iterdir() if p.name.endswith((".yaml", ".yml")))


def load_pack(extra: Iterable[str | Path] = (), *, bundled: bool = True) -> RulePack:
    """Load the bundled rules plus files or folders given by the user; fail on the first error."""
    paths: list[Path] = bundled_rule_files() if bundled else []
    for item in extra:
        p = Path(item)
        if p.is_dir():
            found = sorted([*p.glob("*.yaml"), *p.glob("*.yml")])
            if not found:
                raise RuleError(p, None, None, "folder holds no *.yaml rule file")
            paths.extend(found)
        elif p.is_file() or (p.exists() and not p.is_dir()):
            paths.append(p)  # not a regular file (a FIFO, a device): load_file says so
        elif p.is_symlink():
            raise RuleError(p, None, None, "a symbolic link to nothing (or a loop of links)")
        else:
            raise RuleError(p, None, None, "no such rule file or folder")
    rules: list[Rule] = []
    seen: dict[str, Rule] = {}
    # The same file named twice (`--rules a.yaml --rules ./a.yaml`, a folder and a file in it) is
    # loaded once: its ids would otherwise clash with themselves.
    paths = list({_identity(p): p for p in reversed(paths)}.values())[::-1]
    for path in paths:
        for rule in load_file(path):
            if rule.id in seen:
                first = seen[rule.id]
                raise RuleError(
                    path, rule.line, rule.id, f"duplicate id (first defined at {first.path}:{first.line})"
                )
            seen[rule.id] = rule
            rules.append(rule)
    return RulePack(tuple(rules), tuple(str(p) for p in paths))


def _identity(path: Path) -> Path:
    try:
        return path.resolve()
    except (OSError, RuntimeError):  # a link loop: reported when the file is read
        return path.absolute()


def load_file(path: str | Path) -> list[Rule]:
    path = Path(path)
    try:
        # Non-blocking, so that a FIFO (or a device) named *.yaml is refused, not waited on forever.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        why = "a symbolic link loop" if exc.errno == errno.ELOOP else exc.strerror
        raise RuleError(path, None, None, f"cannot read: {why}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        what = "a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "a device or socket"
        raise RuleError(path, None, None, f"not a regular file ({what}): a rule file is plain text")
    with os.fdopen(fd, "rb") as f:
        try:
            data = f.read(MAX_RULE_FILE_BYTES + 1)
        except OSError as exc:
            raise RuleError(path, None, None, f"cannot read: {exc.strerror}") from None
    if len(data) > MAX_RULE_FILE_BYTES:
        raise RuleError(path, None, None, f"larger than {MAX_RULE_FILE_BYTES // 1024} KiB: "
                                          f"rule files are hand-written; split it into several files")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise RuleError(path, line, None, "not valid UTF-8") from None
    return parse_rules(text, path)


def parse_rules(text: str, path: str | Path = "<string>") -> list[Rule]:
    import yaml  # here, not at module level: --help and status must not pay for it

    bad = _CONTROL_RE.search(text)
    if bad:
        line = text.count("\n", 0, bad.start()) + 1
        column = bad.start() - (text.rfind("\n", 0, bad.start()) + 1) + 1
        raise RuleError(path, line, None, f"control character U+{ord(bad.group()):04X} at column {column}: "
                                          f"rule files are plain text (write escapes in quoted strings)")
    root = _compose_fast(yaml, text)
    if root is not None:
        return NodeReader(path, yaml).read(root)
    loader = _plain_loader(yaml)(text)
    try:
        root = loader.get_single_node()
    except _AliasError as exc:
        raise RuleError(path, exc.line, None, exc.message) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        problem = exc.problem or exc.context or "invalid YAML"
        raise RuleError(path, line, None, f"YAML syntax error: {problem}") from None
    except yaml.YAMLError as exc:
        raise RuleError(path, None, None, f"YAML error: {exc}") from None
    finally:
        loader.dispose()
    return NodeReader(path, yaml).read(root)


def _compose_fast(yaml: Any, text: str) -> Any:
    """The node tree of `text` through libyaml (CSafeLoader: 2 ms for the shipped rule files, where
    the pure-Python SafeLoader takes 37 ms), or None where PyYAML was built without it, the text is
    not valid YAML or it holds an anchor or alias: those go through `_plain_loader`, whose messages
    and refusals are the ones the user sees. The nodes are the same classes with the same tags and
    lines (tests/rules/test_loader_fast.py compares both on every rule file)."""
    fast = getattr(yaml, "CSafeLoader", None)
    if fast is None:
        return None
    loader = fast(text)
    try:
        # libyaml composes in C, so PlainLoader's compose_node refusal cannot hook in: the events
        # are read first (C too), and an anchor or alias sends the text to the slow path.
        while loader.check_event():
            event = loader.get_event()
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
                return None
    except yaml.YAMLError:
        return None
    finally:
        loader.dispose()
    loader = fast(text)
    try:
        return loader.get_single_node()
    except yaml.YAMLError:
        return None
    finally:
        loader.dispose()


class _AliasError(Exception):
    def __init__(self, line: int, message: str):
        super().__init__(message)
        self.line = line
        self.message = message


def _plain_loader(yaml: Any) -> Any:
    """SafeLoader refusing anchors and aliases: each alias would be read (and its snippets parsed)
    again, so a small file could stand for an enormous one; rule files spell every value out."""

    class PlainLoader(yaml.SafeLoader):  # type: ignore[misc,name-defined]
        def compose_node(self, parent: Any, index: Any) -> Any:
            event = self.peek_event()
            if isinstance(event, yaml.AliasEvent):
                raise _AliasError(event.start_mark.line + 1,
                                  f"YAML alias *{event.anchor} is not allowed: rule files spell every value out")
            if getattr(event, "anchor", None) is not None:
                raise _AliasError(event.start_mark.line + 1,
                                  f"YAML anchor &{event.anchor} is not allowed: rule files spell every value out")
            return super().compose_node(parent, index)

    return PlainLoader


class NodeReader:
    """Walks the YAML node tree so every value keeps its line number (operations read through it)."""

    def __init__(self, path: str | Path, yaml: Any):
        self.path = str(path)
        self.yaml = yaml
        self.rule_id: str | None = None
        self.package = DEFAULT_PACKAGE

    def fail(self, node: Any, message: str) -> RuleError:
        line = node.start_mark.line + 1 if node is not None else None
        return RuleError(self.path, line, self.rule_id, message)

    def mapping(self, node: Any, what: str) -> dict[str, tuple[Any, Any]]:
        """Key → (key node, value node); duplicate keys are an error, not a silent overwrite."""
        if not isinstance(node, self.yaml.MappingNode):
            raise self.fail(node, f"{what} must be a mapping")
        out: dict[str, tuple[Any, Any]] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, self.yaml.ScalarNode):
                raise self.fail(key_node, f"{what} has a key that is not a plain name")
            key = key_node.value
            if key in out:
                raise self.fail(key_node, f"{what} has key {key!r} twice")
            out[key] = (key_node, value_node)
        return out

    def string(self, node: Any, what: str) -> str:
        if not isinstance(node, self.yaml.ScalarNode) or node.tag != "tag:yaml.org,2002:str":
            raise self.fail(node, f"{what} must be a string")
        return str(node.value)

    def scalar(self, node: Any, what: str) -> str:
        if not isinstance(node, self.yaml.ScalarNode) or node.value == "":
            raise self.fail(node, f"{what} must be a non-empty value")
        return str(node.value)

    def names(self, node: Any, what: str) -> list[tuple[str, Any]]:
        if not isinstance(node, self.yaml.SequenceNode) or not node.value:
            raise self.fail(node, f"{what} must be a non-empty list of argument names")
        out = []
        for item in node.value:
            name = self.string(item, f"each entry of {what}")
            if not is_identifier(name):
                raise self.fail(item, f"{what}: {name!r} is not a valid argument name")
            out.append((name, item))
        return out

    def reject_tags(self, root: Any) -> None:
        """Refuse any node with a non-plain tag, naming the rule it sits in."""
        rule_items: set[int] = set()
        if isinstance(root, self.yaml.MappingNode):
            for key, value in root.value:
                if getattr(key, "value", None) == "rules" and isinstance(value, self.yaml.SequenceNode):
                    rule_items = {id(item) for item in value.value}
        seen: set[int] = set()
        stack: list[tuple[Any, str | None]] = [(root, None)]
        while stack:
            node, rule_id = stack.pop()
            if id(node) in seen:
                continue  # an alias: the node was checked where its anchor is
            seen.add(id(node))
            if id(node) in rule_items:
                rule_id = _peek_id(node, self.yaml)
            if node.tag not in _PLAIN_TAGS:
                tag = node.tag.replace("tag:yaml.org,2002:", "!!")
                raise RuleError(
                    self.path,
                    node.start_mark.line + 1,
                    rule_id,
                    f"YAML tag {tag!r} is not allowed: rule files hold plain strings, lists and mappings",
                )
            if isinstance(node, self.yaml.MappingNode):
                children = [child for pair in node.value for child in pair]
            elif isinstance(node, self.yaml.SequenceNode):
                children = list(node.value)
            else:
                children = []
            stack.extend((child, rule_id) for child in reversed(children))

    def read(self, root: Any) -> list[Rule]:
        if root is None:
            raise RuleError(self.path, None, None, "file is empty: expected 'schema', 'rules'")
        self.reject_tags(root)
        top = self.mapping(root, "the file")
        for key, (key_node, _) in top.items():
            if key not in TOP_KEYS:
                raise self.fail(key_node, f"unknown key {key!r} at top level (known: {', '.join(TOP_KEYS)})")
        if "schema" not in top:
            raise self.fail(root, "missing 'schema: 1'")
        schema_node = top["schema"][1]
        if getattr(schema_node, "value", None) != str(SCHEMA_VERSION):
            raise self.fail(
                schema_node,
                f"unsupported schema {getattr(schema_node, 'value', None)!r} (this tool reads schema {SCHEMA_VERSION})",
            )
        if "package" in top:
            self.package = self.string(top["package"][1], "'package'").strip()
            if not self.package:
                raise self.fail(top["package"][1], "'package' must name a distribution")
        if "rules" not in top:
            raise self.fail(root, "missing 'rules' list")
        rules_node = top["rules"][1]
        if not isinstance(rules_node, self.yaml.SequenceNode) or not rules_node.value:
            raise self.fail(rules_node, "'rules' must be a non-empty list")
        return [self.rule(node) for node in rules_node.value]

    def rule(self, node: Any) -> Rule:
        from packaging.version import InvalidVersion, Version

        fields, rule_id = self._identify(node)
        for key, (key_node, value_node) in fields.items():
            if key not in RULE_KEYS:
                raise self.fail(key_node, _unknown_key_message(key, value_node, self.yaml))
        if "call" in fields and "in" in fields:
            raise self.fail(fields["in"][0], "a rule has 'call' (calls by name) or 'in' (a region of the package), not both")
        for required in ("call" if "in" not in fields else "in", "since", "why"):
            if required not in fields:
                raise self.fail(node, f"missing {required!r}")
        kind = "scope" if "in" in fields else "call"
        calls = self.calls(fields["call"][1]) if kind == "call" else ()
        scope = self.scope(fields["in"][1]) if kind == "scope" else None
        if "guard" in fields and kind != "scope":
            raise self.fail(fields["guard"][0], "'guard' goes with 'in' (a call rule is guarded by the signature)")
        since_node = fields["since"][1]
        since_text = self.scalar(since_node, "'since'")
        try:
            since = Version(since_text)
        except InvalidVersion:
            raise self.fail(since_node, f"'since' {since_text!r} is not a PEP 440 version") from None
        why = self.string(fields["why"][1], "'why'").strip()
        option = self.option(fields["option"][1]) if "option" in fields else None
        symptoms = self.symptoms(fields["symptoms"][1]) if "symptoms" in fields else ()
        signature = self.signature(fields["signature"][1]) if "signature" in fields else None
        parsed, guard = self._operations(node, fields, kind, calls, signature)
        examples = self.examples(fields["examples"][1]) if "examples" in fields else ()
        unchanged = self.unchanged(fields["unchanged"][1]) if "unchanged" in fields else ()
        return Rule(
            id=rule_id,
            calls=calls,
            since=since,
            why=why,
            path=self.path,
            line=node.start_mark.line + 1,
            signature=signature,
            ops=tuple(parsed.items()),
            examples=examples,
            unchanged=unchanged,
            scope=scope,
            guard=guard,
            package=self.package,
            option=option,
            symptoms=symptoms,
        )

    def _identify(self, node: Any) -> tuple[dict[str, Any], str]:
        """The rule's fields and its id, checked; from here on every message names the rule."""
        self.rule_id = _peek_id(node, self.yaml)  # so that even a key given twice names its rule
        fields = self.mapping(node, "a rule")
        if "id" not in fields:
            raise self.fail(node, "rule has no 'id'")
        id_node = fields["id"][1]
        self.rule_id = None
        rule_id = self.scalar(id_node, "'id'")
        if not _ID_RE.fullmatch(rule_id):
            raise self.fail(id_node, f"id {rule_id!r} must be lowercase letters, digits and dashes")
        self.rule_id = rule_id
        return fields, rule_id

    def _operations(self, node: Any, fields: dict[str, Any], kind: str, calls: tuple[str, ...],
                    signature: Any) -> tuple[dict[str, Any], Guard]:
        """The rule's operations, each parsed by its own OPERATIONS entry, and the guard they imply
        added to the rule's own."""
        if not any(name in fields for name in OPERATIONS):
            raise self.fail(node, f"rule has no operation (one of: {', '.join(OPERATIONS)})")
        for name, op in OPERATIONS.items():
            for key in op.keys[1:]:
                if key in fields and name not in fields:
                    raise self.fail(fields[key][0], f"{key!r} goes with {name!r} only")
        parsed: dict[str, Any] = {}
        for name, op in OPERATIONS.items():
            if name in fields:
                if kind not in op.kinds:
                    need = "'in: module:Qual.name'" if "scope" in op.kinds else "'call'"
                    raise self.fail(fields[name][0], f"{name!r} needs {need}")
                parsed[name] = op.parse(self, fields, parsed, signature)
        guard = self.guard(fields["guard"][1]) if "guard" in fields else Guard()
        for name, spec in parsed.items():
            implied = OPERATIONS[name].implied_guard
            if implied is not None:
                guard = guard + Guard(**implied(spec, calls))
        touched = [arg for name, spec in parsed.items() for arg in OPERATIONS[name].touches(spec)]
        dupes = sorted({n for n in touched if touched.count(n) > 1})
        if dupes:
            raise self.fail(node, f"argument {dupes[0]!r} appears in more than one of drop/add/rename")
        if "move" in parsed and parsed["move"] in calls:
            raise self.fail(fields["move"][1], f"'move' {parsed['move']!r} is the same as 'call'")
        return parsed, guard

    def unchanged(self, node: Any) -> tuple[str, ...]:
        if not isinstance(node, self.yaml.SequenceNode):
            raise self.fail(node, "'unchanged' must be a list of code snippets")
        return tuple(self.snippet(n, "each 'unchanged' entry") for n in node.value)

    def symptoms(self, node: Any) -> tuple[str, ...]:
        """Regular expressions of the failures the rule fixes (searched in the rehearsal's exception)."""
        import re

        if not isinstance(node, self.yaml.SequenceNode) or not node.value:
            raise self.fail(node, "'symptoms' must be a list of regular expressions")
        out = []
        for item in node.value:
            text = self.scalar(item, "each 'symptoms' entry")
            try:
                re.compile(text)
            except re.error as e:
                raise self.fail(item, f"'symptoms' entry {text!r} is not a regular expression ({e})") from None
            out.append(text)
        return tuple(out)

    def option(self, node: Any) -> str:
        from ..kinds import RuleOption

        name = self.scalar(node, "'option'")
        known = [o.value for o in RuleOption]
        if name not in known:
            raise self.fail(node, f"'option' {name!r} is not an opt-in the tool has (known: {', '.join(known)})")
        return name

    def calls(self, node: Any) -> tuple[str, ...]:
        items = node.value if isinstance(node, self.yaml.SequenceNode) else [node]
        if not items:
            raise self.fail(node, "'call' must name at least one callable")
        out = []
        for item in items:
            name = self.scalar(item, "'call'")
            if not QUALNAME_RE.fullmatch(name):
                raise self.fail(item, f"'call' {name!r} is not a fully qualified name like vllm.module.Name")
            if name in out:
                raise self.fail(item, f"'call' lists {name!r} twice")
            out.append(name)
        return tuple(out)

    def scope(self, node: Any) -> str:
        text = self.scalar(node, "'in'")
        module, path = parse_scope(text)
        if not QUALNAME_RE.fullmatch(module) and not module.isidentifier():
            raise self.fail(node, f"'in' {text!r}: {module!r} is not a dotted module name")
        inner = ".".join(path)
        if inner and not all(part.isidentifier() for part in path):
            raise self.fail(node, f"'in' {text!r}: {inner!r} is not a class or function path like Class.method")
        return text

    def qualnames(self, node: Any, what: str) -> tuple[str, ...]:
        items = node.value if isinstance(node, self.yaml.SequenceNode) else [node]
        out = []
        for item in items:
            name = self.scalar(item, what)
            if not QUALNAME_RE.fullmatch(name):
                raise self.fail(item, f"{what} {name!r} is not a fully qualified name like vllm.module.Class.name")
            out.append(name)
        return tuple(out)

    def guard(self, node: Any) -> Guard:
        entries = self.mapping(node, "'guard'")
        for key, (key_node, _) in entries.items():
            if key not in ("defines", "lacks", "accepts", "requires"):
                raise self.fail(key_node, f"'guard' has unknown key {key!r} (known: defines, lacks, accepts, requires)")
        accepts = []
        if "accepts" in entries:
            for callee, (key_node, value_node) in self.mapping(entries["accepts"][1], "'guard: accepts'").items():
                if not QUALNAME_RE.fullmatch(callee):
                    raise self.fail(key_node, f"'guard: accepts' {callee!r} is not a fully qualified name")
                accepts.append((callee, self.scalar(value_node, f"'guard: accepts' parameter of {callee!r}")))
        requires = []
        if "requires" in entries:
            from packaging.specifiers import InvalidSpecifier, SpecifierSet

            for dist, (key_node, value_node) in self.mapping(entries["requires"][1], "'guard: requires'").items():
                if not DISTRIBUTION_RE.fullmatch(dist):
                    raise self.fail(key_node, f"'guard: requires' {dist!r} is not a distribution name like transformers")
                spec = self.scalar(value_node, f"'guard: requires' version of {dist!r}")
                try:
                    SpecifierSet(spec)
                except InvalidSpecifier:
                    raise self.fail(value_node, f"'guard: requires' {dist}: {spec!r} is not a version "
                                                "specifier like '>=5'") from None
                requires.append((re.sub(r"[-_.]+", "-", dist).lower(), spec))
        defines: tuple[str, ...] = ()
        lacks: tuple[str, ...] = ()
        reasons: list[tuple[str, str]] = []
        if "defines" in entries:
            defines = self.guard_names(entries["defines"][1], "'guard: defines'", reasons)
        if "lacks" in entries:
            lacks = self.guard_names(entries["lacks"][1], "'guard: lacks'", reasons)
        return Guard(defines, lacks, tuple(accepts), tuple(requires), tuple(reasons))

    def guard_names(self, node: Any, what: str, reasons: list[tuple[str, str]]) -> tuple[str, ...]:
        """A `defines`/`lacks` list of names, or a mapping of each name to the sentence its failing
        means (the "not needed" line says it instead of "C does not define x")."""
        if not isinstance(node, self.yaml.MappingNode):
            return self.qualnames(node, what)
        out = []
        for name, (key_node, value_node) in self.mapping(node, what).items():
            if not QUALNAME_RE.fullmatch(name):
                raise self.fail(key_node, f"{what} {name!r} is not a fully qualified name like vllm.module.Class.name")
            out.append(name)
            reasons.append((name, self.scalar(value_node, f"{what} reason for {name!r}").strip()))
        return tuple(out)

    def signature(self, node: Any) -> OldSignature:
        text = self.string(node, "'signature'").strip()
        try:
            fn = ast.parse(f"def _{text}: pass").body[0]
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            shown = text if len(text) <= 80 else text[:77] + "..."
            raise self.fail(node, f"'signature' {shown!r} is not a parameter list like (a, b, c=None)") from None
        assert isinstance(fn, ast.FunctionDef)
        args = fn.args
        positional = tuple(a.arg for a in [*args.posonlyargs, *args.args])
        names = {*positional, *(a.arg for a in args.kwonlyargs)}
        if positional and positional[0] == "self":
            raise self.fail(node, "'signature' must leave out self")
        return OldSignature(text, positional, frozenset(names), args.vararg is not None,
                            frozenset(a.arg for a in args.posonlyargs))

    def snippet(self, node: Any, what: str) -> str:
        code = self.string(node, what)
        try:
            ast.parse(code)
        except SyntaxError as exc:
            where = f" (line {exc.lineno} of the snippet)" if exc.lineno else ""
            raise self.fail(node, f"{what} is not valid Python: {exc.msg}{where}") from None
        except ValueError as exc:  # a NUL byte, on Python before 3.12
            raise self.fail(node, f"{what} is not valid Python: {exc}") from None
        except (RecursionError, MemoryError):
            # CPython's parser gives up on a deeply nested expression (a generated 20,000-term sum).
            raise self.fail(node, f"{what} is nested too deeply for Python's parser: "
                                  f"an example is a short hand-written snippet") from None
        return code

    def examples(self, node: Any) -> tuple[Example, ...]:
        if not isinstance(node, self.yaml.SequenceNode) or not node.value:
            raise self.fail(node, "'examples' must be a non-empty list of before/after pairs")
        out = []
        for item in node.value:
            pair = self.mapping(item, "an example")
            for key, (key_node, _) in pair.items():
                if key not in ("before", "after"):
                    raise self.fail(key_node, f"an example has unknown key {key!r} (known: before, after)")
            if "before" not in pair or "after" not in pair:
                raise self.fail(item, "an example needs both 'before' and 'after'")
            before = self.snippet(pair["before"][1], "'before'")
            after = self.snippet(pair["after"][1], "'after'")
            out.append(Example(before, after, item.start_mark.line + 1))
        return tuple(out)


def _peek_id(node: Any, yaml: Any) -> str | None:
    """The rule's id, read before the rule is validated (None unless it is a well-formed id)."""
    if not isinstance(node, yaml.MappingNode):
        return None
    for key, value in node.value:
        if getattr(key, "value", None) == "id" and isinstance(value, yaml.ScalarNode):
            return value.value if _ID_RE.fullmatch(value.value) else None
    return None


# Words people reach for that mean one of our operations (a closer hint than spelling alone).
_SYNONYMS = {"remove": "drop", "delete": "drop", "del": "drop", "insert": "add", "append": "add",
             "replace": "move", "warn": "notice", "flag": "notice"}


def _unknown_key_message(key: str, value_node: Any, yaml: Any) -> str:
    op_match = ([_SYNONYMS[key]] if key in _SYNONYMS
                else difflib.get_close_matches(key, OPERATIONS, n=1, cutoff=0.6))
    key_match = difflib.get_close_matches(key, RULE_KEYS, n=1, cutoff=0.6)
    looks_like_op = bool(op_match) or isinstance(value_node, (yaml.SequenceNode, yaml.MappingNode))
    if looks_like_op and not (key_match and key_match[0] not in OPERATIONS):
        hint = f"; did you mean {op_match[0]!r}?" if op_match else ""
        return f"unknown operation {key!r} (operations: {', '.join(OPERATIONS)}){hint}"
    hint = f"; did you mean {key_match[0]!r}?" if key_match else ""
    return f"unknown key {key!r} in rule{hint}"

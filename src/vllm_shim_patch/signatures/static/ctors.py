"""Generated constructors: the `__init__` that dataclasses, pydantic dataclasses, PEP 681
`dataclass_transform` decorators and `msgspec.Struct` write from a class's fields. Most vLLM
configs and `SamplingParams` have no `__init__` in their source, so their signature has to be
rebuilt from the fields by the rules each generator follows."""

from __future__ import annotations

import ast
from dataclasses import dataclass

from vllm_shim_patch.signatures.model import IGNORED_EXTRA, KW_ONLY, POS_OR_KW, VAR_KW
from vllm_shim_patch.signatures.static.names import STRUCT, Names
from vllm_shim_patch.signatures.static.scope import (
    Class,
    Ext,
    Func,
    Module,
    Mro,
    Obj,
    RawParam,
    Unknown,
    dotted,
    literal,
    returns_argument,
)

__all__ = ["Constructors", "Spec"]

# Class decorators that return the class they were given.
_PLAIN_CLASS_DECORATORS = frozenset(
    {
        "typing.final",
        "typing_extensions.final",
        "functools.total_ordering",
        "typing.runtime_checkable",
        "typing_extensions.runtime_checkable",
        "typing_extensions.deprecated",
        "warnings.deprecated",
        "enum.unique",
        "typing.type_check_only",
    }
)
_DATACLASS_TRANSFORM = frozenset(
    {"typing.dataclass_transform", "typing_extensions.dataclass_transform"}
)
_STDLIB_DATACLASS = "dataclasses.dataclass"
_PYDANTIC_DATACLASS = "pydantic.dataclasses.dataclass"
_CONFIG_DICT = frozenset({"pydantic.ConfigDict", "pydantic.config.ConfigDict"})
_CLASSVAR = frozenset({"typing.ClassVar", "typing_extensions.ClassVar"})
_ANNOTATED = frozenset({"typing.Annotated", "typing_extensions.Annotated"})
_KW_ONLY_SENTINEL = "dataclasses.KW_ONLY"
_STDLIB_FIELD = "dataclasses.field"
_PYDANTIC_FIELD = frozenset({"pydantic.Field", "pydantic.fields.Field"})
_MSGSPEC_FIELD = "msgspec.field"


@dataclass(frozen=True)
class Spec:
    """How a dataclass-like class gets its __init__."""

    backend: str  # "stdlib" | "pydantic" | "transform"
    init: bool
    kw_only: bool
    extra: str  # "forbid" | "ignore" | "allow": what happens to unknown keywords
    field_specifiers: frozenset[str]


@dataclass
class _Field:
    has_default: bool
    kw_only: bool
    init: bool
    default: str | None = None  # a literal default as source text


class Constructors:
    """Reads the `__init__` a dataclass-like decorator or `msgspec.Struct` generates.

    Holds the `Names` it resolves decorators, annotations and bases with (and shares its caches).
    """

    def __init__(self, names: Names):
        self.names = names

    def _decorator_target(self, cls: Class, dec: ast.expr) -> Obj:
        try:
            return self.names.expr(cls.module, dec.func if isinstance(dec, ast.Call) else dec)
        except Unknown as exc:
            raise Unknown(f"class decorator @{ast.unparse(dec)} on {cls.label}: {exc}") from None

    def dataclass_spec(self, cls: Class) -> Spec | None:
        """How the class decorators generate __init__, None if they do not."""
        specs = []
        for dec in cls.node.decorator_list:
            obj = self._decorator_target(cls, dec)
            qual = obj.qualname if isinstance(obj, Ext) else None
            if qual in _PLAIN_CLASS_DECORATORS:
                continue
            if isinstance(obj, Func) and returns_argument(
                obj.node, dec if isinstance(dec, ast.Call) else None
            ):
                continue  # vLLM 0.10-0.15's @config (docs only, `return cls`), @bc_linter_include
            kwargs = _call_kwargs(dec, f"@{ast.unparse(dec)}")
            if qual == _STDLIB_DATACLASS:
                specs.append(
                    Spec(
                        "stdlib",
                        _flag(kwargs, "init", True),
                        _flag(kwargs, "kw_only", False),
                        "forbid",
                        frozenset({_STDLIB_FIELD}),
                    )
                )
            elif qual == _PYDANTIC_DATACLASS:
                specs.append(self._pydantic_spec(kwargs, "ignore", frozenset(), cls))
            elif isinstance(obj, Func) and (transform := self._transform(obj)) is not None:
                kw_default, fields, backend, extra = transform
                if backend == "pydantic":
                    specs.append(self._pydantic_spec(kwargs, extra, fields, cls, kw_default))
                else:
                    specs.append(
                        Spec(
                            backend,
                            _flag(kwargs, "init", True),
                            _flag(kwargs, "kw_only", kw_default),
                            "forbid",
                            fields | ({_STDLIB_FIELD} if backend == "stdlib" else set()),
                        )
                    )
            else:
                raise Unknown(
                    f"class decorator @{ast.unparse(dec)} on {cls.label} may replace the class"
                )
        if len(specs) > 1:
            raise Unknown(f"{cls.label} has more than one dataclass decorator")
        return specs[0] if specs else None

    def _pydantic_spec(
        self,
        kwargs: dict[str, ast.expr],
        extra: str,
        fields: frozenset[str],
        cls: Class,
        kw_default: bool = False,
    ) -> Spec:
        config = kwargs.get("config")
        if config is not None:
            extra = self._config_extra(cls.module, config, extra) or extra
        return Spec(
            "pydantic",
            True,
            _flag(kwargs, "kw_only", kw_default),
            extra,
            fields | {_STDLIB_FIELD} | _PYDANTIC_FIELD,
        )

    def _config_extra(self, mod: Module, config: ast.expr, default: str | None) -> str | None:
        """The `extra` setting a pydantic config literal gives (ConfigDict(...) or {...})."""
        items: dict[str, ast.expr]
        if isinstance(config, ast.Call) and self.names.qual(mod, config.func) in _CONFIG_DICT:
            items = _call_kwargs(config, ast.unparse(config))
        elif isinstance(config, ast.Dict) and all(isinstance(k, ast.Constant) for k in config.keys):
            keys = [k.value for k in config.keys]  # type: ignore[union-attr]
            items = dict(zip(keys, config.values))
        else:
            raise Unknown(f"pydantic config {ast.unparse(config)} is not a literal")
        if "extra" not in items:
            return default
        value = literal(items["extra"], "pydantic extra")
        if value not in ("forbid", "ignore", "allow"):
            raise Unknown(f"pydantic extra={value!r} is not understood")
        return str(value)

    def _transform(self, func: Func) -> tuple[bool, frozenset[str], str, str] | None:
        """For a PEP 681 decorator: (kw_only_default, field specifiers, backend, pydantic extra)."""
        for dec in func.node.decorator_list:
            if (
                self.names.qual(func.module, dec.func if isinstance(dec, ast.Call) else dec)
                in _DATACLASS_TRANSFORM
            ):
                break
        else:
            return None
        kwargs = _call_kwargs(dec, "@dataclass_transform") if isinstance(dec, ast.Call) else {}
        kw_default = _flag(kwargs, "kw_only_default", False)
        fields: set[str] = set()
        spec_expr = kwargs.get("field_specifiers")
        if spec_expr is not None:
            if not isinstance(spec_expr, (ast.Tuple, ast.List)):
                raise Unknown("field_specifiers is not a literal tuple")
            for elt in spec_expr.elts:
                fields.add(self._key(self.names.expr(func.module, elt)))
        # What the decorator body really calls decides the runtime behaviour (vLLM's @config
        # wraps pydantic.dataclasses.dataclass with extra="forbid").
        backends, extras = set(), set()
        for node in ast.walk(func.node):
            if isinstance(node, ast.Call) and dotted(node.func) is not None:
                try:
                    qual = self.names.qual(func.module, node.func)
                except Unknown:
                    continue
                if qual == _PYDANTIC_DATACLASS:
                    backends.add("pydantic")
                elif qual == _STDLIB_DATACLASS:
                    backends.add("stdlib")
                elif qual in _CONFIG_DICT:
                    extra = self._config_extra(func.module, node, None)
                    if extra is not None:
                        extras.add(extra)
        backend = backends.pop() if len(backends) == 1 else "transform"
        if len(extras) > 1:
            raise Unknown(f"{func.node.name} sets more than one pydantic extra policy")
        return kw_default, frozenset(fields), backend, extras.pop() if extras else "ignore"

    def _key(self, obj: Obj) -> str:
        if isinstance(obj, Ext):
            return obj.qualname
        if isinstance(obj, (Func, Class)):
            return f"{obj.module.name}.{obj.node.name}"
        raise Unknown("field specifier is a module")

    def _fields(self, cls: Class, spec: Spec) -> dict[str, _Field]:
        if cls.scope.nested_annotations:
            raise Unknown(f"{cls.label} annotates names inside if/try/with blocks")
        fields: dict[str, _Field] = {}
        for base in reversed(self.names.mro(cls)[1:]):
            if isinstance(base, Class):
                base_spec = self.dataclass_spec(base)
                if base_spec is not None:
                    fields.update(self._fields(base, base_spec))
        kw_only = spec.kw_only
        for stmt in cls.node.body:
            if not isinstance(stmt, ast.AnnAssign) or not isinstance(stmt.target, ast.Name):
                continue
            kind = self._annotation_kind(cls.module, stmt.annotation)
            if kind == "classvar":
                continue
            if kind == "kw_only":
                kw_only = True
                continue
            if spec.backend == "pydantic" and self._annotated_field(cls.module, stmt.annotation):
                # pydantic reads defaults from Annotated[T, Field(default=...)] too.
                raise Unknown(
                    f"{cls.label}.{stmt.target.id} has a Field(...) inside Annotated[...]"
                )
            fields[stmt.target.id] = self._field(
                cls.module, stmt.value, kw_only, spec.field_specifiers
            )
        return fields

    def _annotated_field(self, mod: Module, ann: ast.expr) -> bool:
        if not isinstance(ann, ast.Subscript) or not isinstance(ann.slice, ast.Tuple):
            return False
        try:
            if self.names.qual(mod, ann.value) not in _ANNOTATED:
                return False
        except Unknown:
            return False
        for meta in ann.slice.elts[1:]:
            if isinstance(meta, ast.Call) and dotted(meta.func) is not None:
                try:
                    if self.names.qual(mod, meta.func) in _PYDANTIC_FIELD:
                        return True
                except Unknown:
                    return True  # cannot rule it out
        return False

    def dataclass_params(self, cls: Class, spec: Spec) -> list[RawParam]:
        fields = self._fields(cls, spec)
        params = _order_fields(fields, cls.label)
        if spec.extra == "allow":
            params.append(("extra_data", VAR_KW, False))
        elif spec.extra == "ignore":
            # pydantic drops unknown keywords silently: passing one never fails.
            params.append((IGNORED_EXTRA, VAR_KW, False))
        return params

    def _annotation_kind(self, mod: Module, ann: ast.expr) -> str:
        if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
            try:
                ann = ast.parse(ann.value, mode="eval").body
            except SyntaxError:
                return "field"
        head = ann.value if isinstance(ann, ast.Subscript) else ann
        name = dotted(head)
        if name is None:
            return "field"
        try:
            qual = self.names.qual(mod, head)
        except Unknown:
            if name.rpartition(".")[2] in ("ClassVar", "KW_ONLY"):
                raise Unknown(
                    f"cannot tell whether {name} in {mod.path} is {name.rpartition('.')[2]}"
                ) from None
            return "field"
        if qual in _CLASSVAR:
            return "classvar"
        if qual == _KW_ONLY_SENTINEL:
            return "kw_only"
        return "field"

    def _field(
        self, mod: Module, value: ast.expr | None, kw_only: bool, specifiers: frozenset[str]
    ) -> _Field:
        if value is None:
            return _Field(False, kw_only, True)
        if not isinstance(value, ast.Call) or dotted(value.func) is None:
            return _Field(True, kw_only, True, _literal_text(value))
        try:
            key = self._key(self.names.expr(mod, value.func))
        except Unknown:
            key = None
        if key not in specifiers:
            return _Field(True, kw_only, True)  # any other call is just the default value
        kwargs = _call_kwargs(value, ast.unparse(value))
        if "alias" in kwargs or "validation_alias" in kwargs:
            raise Unknown(f"{ast.unparse(value)} renames the constructor keyword")
        has_default = "default_factory" in kwargs or "factory" in kwargs
        if key in _PYDANTIC_FIELD and value.args:
            default: ast.expr | None = value.args[0]
        elif value.args:
            raise Unknown(f"positional arguments in {ast.unparse(value)}")
        else:
            default = kwargs.get("default")
        # pydantic's Field(...) marks a required field.
        required_marker = (
            key in _PYDANTIC_FIELD and isinstance(default, ast.Constant) and default.value is ...
        )
        if default is not None and not required_marker:
            has_default = True
        return _Field(has_default, _flag(kwargs, "kw_only", kw_only), _flag(kwargs, "init", True),
                      None if required_marker else _literal_text(default))

    def namedtuple_params(self, cls: Class) -> list[RawParam]:
        """typing.NamedTuple: every annotated name of the class body is a field, in order (the
        typing module does not exempt ClassVar), each positional-or-keyword."""
        if cls.scope.nested_annotations:
            raise Unknown(f"{cls.label} annotates names inside if/try/with blocks")
        return _order_fields(_namedtuple_fields(cls), cls.label)

    def struct_params(self, cls: Class, mro: Mro) -> list[RawParam]:
        """msgspec.Struct: the fields of the Struct classes in the MRO (no own __init__/__new__)."""
        fields: dict[str, _Field] = {}
        for entry in reversed(mro):
            if isinstance(entry, str):
                continue
            for special in ("__init__", "__new__"):
                if special in entry.scope.bindings:
                    raise Unknown(f"{entry.label} defines {special} next to msgspec.Struct")
            if self.dataclass_spec(entry) is not None:
                raise Unknown(f"{entry.label} is a dataclass and a msgspec.Struct")
            is_struct = STRUCT in self.names.mro(entry)
            kwargs = {kw.arg: kw.value for kw in entry.node.keywords if kw.arg}
            kw_only = bool(literal(kwargs["kw_only"], "kw_only")) if "kw_only" in kwargs else False
            if entry.scope.nested_annotations:
                raise Unknown(f"{entry.label} annotates names inside if/try/with blocks")
            for stmt in entry.node.body:
                if not isinstance(stmt, ast.AnnAssign) or not isinstance(stmt.target, ast.Name):
                    continue
                if self._annotation_kind(entry.module, stmt.annotation) == "classvar":
                    continue  # vLLM 0.18's PydanticMsgspecMixin annotates only ClassVars
                if not is_struct:
                    raise Unknown(f"mixin {entry.label} of a msgspec.Struct has annotations")
                fields[stmt.target.id] = self._field(
                    entry.module, stmt.value, kw_only, frozenset({_MSGSPEC_FIELD})
                )
        return _order_fields(fields, cls.label)


def _namedtuple_fields(cls: Class) -> dict[str, _Field]:
    fields: dict[str, _Field] = {}
    for stmt in cls.node.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            name = stmt.target.id
            if name.startswith("_"):
                raise Unknown(f"{cls.label}.{name}: a NamedTuple field may not start with '_'")
            fields[name] = _Field(stmt.value is not None, False, True, _literal_text(stmt.value))
    return fields


def _order_fields(fields: dict[str, _Field], label: str) -> list[RawParam]:
    """Generated __init__ order: positional fields, then keyword-only ones, each in field order."""
    params: list[RawParam] = []
    seen_default = False
    for name, f in fields.items():
        if f.init and not f.kw_only:
            if seen_default and not f.has_default:
                raise Unknown(f"{label}: required field {name!r} follows a field with a default")
            seen_default = seen_default or f.has_default
            params.append((name, POS_OR_KW, not f.has_default, f.default))
    params += [
        (name, KW_ONLY, not f.has_default, f.default) for name, f in fields.items() if f.init and f.kw_only
    ]
    return params


def _literal_text(value: ast.expr | None) -> str | None:
    if isinstance(value, ast.Constant) and (value.value is None or isinstance(value.value, (bool, int, float, str))):
        return repr(value.value)
    return None


def _call_kwargs(node: ast.expr, what: str) -> dict[str, ast.expr]:
    if not isinstance(node, ast.Call):
        return {}
    if any(kw.arg is None for kw in node.keywords) or any(
        isinstance(a, ast.Starred) for a in node.args
    ):
        raise Unknown(f"{what} passes **/* arguments")
    return {kw.arg: kw.value for kw in node.keywords if kw.arg is not None}


def _flag(kwargs: dict[str, ast.expr], name: str, default: bool) -> bool:
    if name not in kwargs:
        return default
    value = literal(kwargs[name], name)
    if not isinstance(value, bool):
        raise Unknown(f"{name}={value!r} is not a bool literal")
    return value

"""From a qualified name to the parameters a call binds to: functions as written (unless a
decorator may change them), and for a class the constructor Python would really run, chosen
between `__init__`, `__new__` and a generated one. This is the one place that makes that choice;
what names mean and what generators write are the layers below (`names`, `ctors`)."""

from __future__ import annotations

import ast
from pathlib import Path

from vllm_shim_patch.signatures.model import KW_ONLY, POS_ONLY, POS_OR_KW, VAR_KW, VAR_POS
from vllm_shim_patch.signatures.static.ctors import Constructors
from vllm_shim_patch.signatures.static.names import INIT_ONLY_BASES, NAMEDTUPLES, STRUCT, Names
from vllm_shim_patch.signatures.static.scope import (
    Class,
    Ext,
    Func,
    Method,
    Module,
    RawParam,
    Unknown,
    returns_argument,
)

__all__ = ["Resolver"]

# Decorators on a def that leave the call signature as written.
_PLAIN_FUNC_DECORATORS = frozenset(
    {
        "builtins.staticmethod",
        "builtins.classmethod",
        "functools.lru_cache",
        "functools.cache",
        "typing.override",
        "typing_extensions.override",
        "typing.final",
        "typing_extensions.final",
        "typing_extensions.deprecated",
        "warnings.deprecated",
        "typing.no_type_check",
        "abc.abstractmethod",
        "contextlib.contextmanager",
        "contextlib.asynccontextmanager",
        "torch.inference_mode",
        "torch.no_grad",
        "torch.enable_grad",
        "typing.dataclass_transform",
        "typing_extensions.dataclass_transform",
    }
)


class Resolver:
    """Resolves qualified names under `root` to raw parameter lists, parsing modules on demand.

    One `Names` (and so one module cache) serves the resolver and its `Constructors`.
    """

    def __init__(self, root: Path, packages: tuple[str, ...] = ("vllm",)):
        self.names = Names(root, packages)
        self.ctors = Constructors(self.names)

    def has_package(self, name: str) -> bool:
        return self.names.has_package(name)

    def parsed_modules(self) -> list[str]:
        return self.names.parsed_modules()

    def signature(self, qualname: str) -> tuple[list[RawParam], str]:
        obj = self.names.lookup(qualname)
        if isinstance(obj, Func):
            params = self._func_params(obj, bound=False, method=isinstance(obj, Method))
            return params, f"{obj.module.path}:{obj.node.lineno}"
        if isinstance(obj, Class):
            return self._class_signature(obj)
        if isinstance(obj, Module):
            raise Unknown(f"{qualname} is a module")
        raise Unknown(f"{qualname} resolves to {obj.qualname}, outside the parsed source")

    def bound_signature(self, qualname: str) -> tuple[list[RawParam], str]:
        """The parameters of `a.b.C.m` called on an instance (`obj.m(...)`), inherited ones
        included: self (or cls) is bound, a staticmethod takes all of its own."""
        owner, _, attr = qualname.rpartition(".")
        cls = self.names.lookup(owner)
        if not isinstance(cls, Class):
            raise Unknown(f"{owner} is not a class")
        obj = self.names.class_attr(cls, attr)
        if isinstance(obj, Class):
            return self._class_signature(obj)
        if not isinstance(obj, Func):
            raise Unknown(f"{qualname} is not a def")
        params = _arguments(obj.node.args)
        if self._how(obj) != "staticmethod":
            params = _drop_self(params, obj.node.name)
        return params, f"{obj.module.path}:{obj.node.lineno}"

    def returns(self, qualname: str) -> str:
        """The vLLM class an instance of which `qualname` returns when called: a class itself, or
        a function or method annotated `-> C` (or `-> "C"`), as `module.C`. Unknown for anything
        else (no annotation, a union or Optional, a generic, a class outside the source)."""
        func = self.names.lookup(qualname)
        if isinstance(func, Class):
            return f"{func.module.name}.{func.node.name}"
        if not isinstance(func, Func):
            raise Unknown(f"{qualname} is not a function or class")
        ann = func.node.returns
        if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
            try:
                ann = ast.parse(ann.value, mode="eval").body
            except SyntaxError:
                raise Unknown(f"return annotation of {qualname} does not parse") from None
        if ann is None:
            raise Unknown(f"{qualname} has no return annotation")
        if not isinstance(ann, (ast.Name, ast.Attribute)):
            raise Unknown(f"{qualname} returns {ast.unparse(ann)}, not one class")
        target = self.names.expr(func.module, ann)
        if not isinstance(target, Class):
            raise Unknown(f"{qualname} returns {ast.unparse(ann)}, not a class of the source")
        return f"{target.module.name}.{target.node.name}"

    def _how(self, func: Func) -> str:
        """"function", "staticmethod" or "classmethod"; Unknown for a decorator that may wrap."""
        how = "function"
        for dec in func.node.decorator_list:
            try:
                obj = self.names.expr(func.module, dec.func if isinstance(dec, ast.Call) else dec)
            except Unknown as exc:
                raise Unknown(f"decorator @{ast.unparse(dec)} on {func.node.name}: {exc}") from None
            if isinstance(obj, Func) and returns_argument(
                obj.node, dec if isinstance(dec, ast.Call) else None
            ):
                continue  # vLLM's @bc_linter_include: hands the function back
            qual = obj.qualname if isinstance(obj, Ext) else None
            if qual not in _PLAIN_FUNC_DECORATORS:
                raise Unknown(
                    f"decorator @{ast.unparse(dec)} on {func.node.name} may change its signature"
                )
            if qual in ("builtins.staticmethod", "builtins.classmethod"):
                how = qual.rpartition(".")[2]
        return how

    def _func_params(self, func: Func, bound: bool, method: bool = False) -> list[RawParam]:
        """Parameters as called; `bound` drops self/cls, `method` says it was found on a class."""
        how = self._how(func)
        params = _arguments(func.node.args)
        if (how == "classmethod" and method) or bound:
            if bound and how != "function":
                raise Unknown(f"{func.node.name} is a {how}")
            params = _drop_self(params, func.node.name)
        return params

    # -- classes -----------------------------------------------------------------------------

    def _class_signature(self, cls: Class) -> tuple[list[RawParam], str]:
        mro = self.names.mro(cls)
        if STRUCT in mro:
            return self.ctors.struct_params(cls, mro), cls.origin
        marker = next((i for i, e in enumerate(mro) if isinstance(e, str) and e in NAMEDTUPLES), None)
        if marker is not None:
            return self._namedtuple_signature(cls, mro, marker)
        init: tuple[list[RawParam], str] | None = None
        new: tuple[list[RawParam], str] | None = None
        for entry in mro:
            if isinstance(entry, str):
                if entry in INIT_ONLY_BASES and init is None:
                    raise Unknown(f"{cls.label} is constructed by the __init__ of {entry}")
                if entry in INIT_ONLY_BASES:
                    break  # its __new__ passes any arguments on to the __init__ found
                continue
            spec = self.ctors.dataclass_spec(entry)
            own_init = entry.scope.bindings.get("__init__")
            if init is None and spec is not None and spec.backend == "pydantic" and own_init:
                # pydantic replaces any __init__ of the class with its validating one.
                raise Unknown(f"pydantic dataclass {entry.label} defines __init__")
            if init is None:
                if spec is not None and (spec.init or spec.backend == "pydantic") and not own_init:
                    init = self.ctors.dataclass_params(entry, spec), entry.origin
                elif own_init or "__init__" in entry.scope.overloads:
                    init = self._special(entry, "__init__")
            if new is None and (
                "__new__" in entry.scope.bindings or "__new__" in entry.scope.overloads
            ):
                new = self._special(entry, "__new__")
        if init is not None and new is not None:
            if _passthrough(new[0]):
                return init
            if _passthrough(init[0]):
                return new
            raise Unknown(f"both __new__ and __init__ of {cls.label} take parameters")
        return init or new or ([], cls.origin)

    def _namedtuple_signature(self, cls: Class, mro: list, marker: int) -> tuple[list[RawParam], str]:
        owner = mro[marker - 1]
        for entry in mro[:marker]:
            if not isinstance(entry, Class):
                raise Unknown(f"{cls.label} mixes NamedTuple with {entry}")
            for special in ("__new__", "__init__"):
                if special in entry.scope.bindings or special in entry.scope.overloads:
                    raise Unknown(f"{entry.label} defines {special} over a NamedTuple")
            if self.ctors.dataclass_spec(entry) is not None:
                raise Unknown(f"{entry.label} is a dataclass and a NamedTuple")
        assert isinstance(owner, Class)
        return self.ctors.namedtuple_params(owner), owner.origin

    def _special(self, cls: Class, name: str) -> tuple[list[RawParam], str]:
        obj = self.names.class_attr(cls, name)
        if not isinstance(obj, Func):
            raise Unknown(f"{cls.label}.{name} is not a def")
        return self._func_params(obj, bound=True), f"{obj.module.path}:{obj.node.lineno}"


def _arguments(args: ast.arguments) -> list[RawParam]:
    positional = [(a, POS_ONLY) for a in args.posonlyargs] + [(a, POS_OR_KW) for a in args.args]
    first_default = len(positional) - len(args.defaults)
    params: list[RawParam] = [
        (arg.arg, kind, i < first_default,
         _text(args.defaults[i - first_default]) if i >= first_default else None)
        for i, (arg, kind) in enumerate(positional)
    ]
    if args.vararg is not None:
        params.append((args.vararg.arg, VAR_POS, False))
    for arg, default in zip(args.kwonlyargs, args.kw_defaults):
        params.append((arg.arg, KW_ONLY, default is None, _text(default)))
    if args.kwarg is not None:
        params.append((args.kwarg.arg, VAR_KW, False))
    return params


def _drop_self(params: list[RawParam], name: str) -> list[RawParam]:
    if params and params[0][1] in (POS_ONLY, POS_OR_KW):
        return params[1:]
    if params and params[0][1] == VAR_POS:
        return params  # def m(*args): self arrives in args
    raise Unknown(f"{name} takes no self/cls parameter")


def _text(default: ast.expr | None) -> str | None:
    """A literal default as source text (what a guard on a changed default compares)."""
    if isinstance(default, ast.Constant) and (default.value is None or isinstance(default.value, (bool, int, float, str))):
        return repr(default.value)
    return None


def _passthrough(params: list[RawParam]) -> bool:
    return [p[1] for p in params] == [VAR_POS, VAR_KW]

"""Lazy module exports: what a module-level `__getattr__(name)` returns for one name, found by
running its body on paper with `name` bound to that string.

vLLM exports much of its public surface this way (`vllm.SamplingParams` through `MODULE_ATTRS`
in `vllm/__init__.py`, the config classes of `vllm.transformers_utils.configs`, deprecation
shims). The bodies follow a few shapes: a dict of name → "module:attr" or → module, an
`import_module`/`getattr` pair, `if name == "X": from m import X; return X`, a final
`raise AttributeError`. Only that much Python is modelled: constants, literal module-level
containers, string methods, `in`/`==`/`is` tests, imports, `import_module`, `getattr`,
`globals()`. Anything else (a platform check, a loop, a call with effects) is Unknown with the
statement that stopped it: which branch runs could depend on the machine.
"""

from __future__ import annotations

import ast
from typing import Any

from vllm_shim_patch.signatures.static.scope import (
    Class,
    Ext,
    Func,
    Missing,
    Module,
    Obj,
    Unknown,
    literal,
)
from vllm_shim_patch.vllm_source import resolve_relative

__all__ = ["lazy_export"]

# Calls whose only effect is a message: a deprecation shim warns before it returns.
_MESSAGE_CALLS = frozenset({"warn", "warning", "warning_once", "info", "info_once", "debug"})
_STR_METHODS = frozenset(
    {"split", "rsplit", "partition", "rpartition", "startswith", "endswith", "removeprefix",
     "removesuffix", "strip", "lower"}
)
_IMPORT_MODULE = frozenset({"importlib.import_module"})
_NEXT = object()  # a statement finished without returning
_GLOBALS = object()  # the value of globals()


class _Method:
    def __init__(self, owner: Any, name: str):
        self.owner, self.name = owner, name


def lazy_export(names: Any, mod: Module, func: ast.FunctionDef, name: str) -> Obj:
    """The object `mod.__getattr__(name)` returns; Missing when it surely raises AttributeError.

    `names` is the `Names` resolver (not imported here: it calls this module).
    """
    if not func.args.args and not func.args.posonlyargs:
        raise Unknown(f"__getattr__ in {mod.path} takes no name")
    param = (func.args.posonlyargs + func.args.args)[0].arg
    result = _Body(names, mod, param, name).run(func.body)
    if result is _NEXT:
        raise Unknown(f"__getattr__ in {mod.path} returns None for {name!r}")
    return result  # type: ignore[no-any-return]


class _Body:
    def __init__(self, names: Any, mod: Module, param: str, name: str):
        self.names, self.mod, self.name = names, mod, name
        self.env: dict[str, Any] = {param: name}

    def _stop(self, node: ast.AST, why: str = "cannot be followed statically") -> Unknown:
        return Unknown(f"{ast.unparse(node).splitlines()[0]} (line {node.lineno}) {why}")  # type: ignore[attr-defined]

    # -- statements ------------------------------------------------------------------------

    def run(self, body: list[ast.stmt]) -> Any:
        for stmt in body:
            result = self._stmt(stmt)
            if result is not _NEXT:
                return result
        return _NEXT

    def _stmt(self, stmt: ast.stmt) -> Any:
        if isinstance(stmt, ast.Pass):
            return _NEXT
        if isinstance(stmt, ast.Expr):
            if isinstance(stmt.value, ast.Constant):
                return _NEXT  # a docstring
            func = stmt.value.func if isinstance(stmt.value, ast.Call) else None
            last = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if last in _MESSAGE_CALLS:
                return _NEXT
            raise self._stop(stmt, "may have effects")
        if isinstance(stmt, ast.Import):
            for alias in stmt.names:
                local = alias.asname or alias.name.split(".")[0]
                self.env[local] = self.names._module_obj(alias.name if alias.asname else local)
            return _NEXT
        if isinstance(stmt, ast.ImportFrom):
            base = self.names._absolute(self.mod, stmt)
            target = self.names._module_obj(base)
            for alias in stmt.names:
                if alias.name == "*":
                    raise self._stop(stmt)
                self.env[alias.asname or alias.name] = (
                    Ext(f"{base}.{alias.name}")
                    if isinstance(target, Ext)
                    else self.names._module_attr(target, alias.name)
                )
            return _NEXT
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            if stmt.value is None or len(targets) != 1:
                raise self._stop(stmt)
            target = targets[0]
            if isinstance(target, ast.Subscript) and self._value(target.value) is _GLOBALS:
                return _NEXT  # `globals()[name] = obj` caches the answer; it does not change it
            value = self._value(stmt.value)
            if isinstance(target, ast.Name):
                self.env[target.id] = value
            elif isinstance(target, (ast.Tuple, ast.List)) and all(
                isinstance(e, ast.Name) for e in target.elts
            ):
                if not isinstance(value, (tuple, list)) or len(value) != len(target.elts):
                    raise self._stop(stmt, "does not unpack")
                for elt, item in zip(target.elts, value):
                    self.env[elt.id] = item  # type: ignore[attr-defined]
            else:
                raise self._stop(stmt)
            return _NEXT
        if isinstance(stmt, ast.If):
            taken = stmt.body if self._truth(stmt.test) else stmt.orelse
            return self.run(taken)
        if isinstance(stmt, ast.Return):
            if stmt.value is None:
                raise self._stop(stmt, "returns None")
            value = self._value(stmt.value)
            if not isinstance(value, (Module, Ext, Func, Class)):
                raise self._stop(stmt, "returns a value, not a module, class or function")
            return value
        if isinstance(stmt, ast.Raise):
            exc = stmt.exc.func if isinstance(stmt.exc, ast.Call) else stmt.exc
            if isinstance(exc, ast.Name) and exc.id == "AttributeError":
                raise Missing(
                    f"{self.mod.path} does not define {self.name!r} (its __getattr__ raises"
                    f" AttributeError, line {stmt.lineno})"
                )
            raise self._stop(stmt)
        raise self._stop(stmt)

    def _truth(self, test: ast.expr) -> bool:
        value = self._value(test)
        if isinstance(value, (bool, int, str, type(None), tuple, list, dict, set, frozenset)):
            return bool(value)
        raise self._stop(test, "depends on the run")

    # -- expressions -----------------------------------------------------------------------

    def _value(self, expr: ast.expr) -> Any:
        if isinstance(expr, ast.Constant):
            return expr.value
        if isinstance(expr, ast.Name):
            return self._name(expr)
        if isinstance(expr, ast.JoinedStr):
            parts = []
            for part in expr.values:
                value = self._value(part.value if isinstance(part, ast.FormattedValue) else part)
                if not isinstance(value, str):
                    raise self._stop(expr)
                parts.append(value)
            return "".join(parts)
        if isinstance(expr, ast.Attribute):
            owner = self._value(expr.value)
            if isinstance(owner, (Module, Ext, Class)):
                return self.names._getattr(owner, expr.attr)
            if (isinstance(owner, str) and expr.attr in _STR_METHODS) or (
                isinstance(owner, dict) and expr.attr == "get"
            ):
                return _Method(owner, expr.attr)
            raise self._stop(expr)
        if isinstance(expr, ast.Subscript):
            container, key = self._value(expr.value), self._value(expr.slice)
            if container is _GLOBALS:
                return self._global(key, expr)
            try:
                return container[key]
            except (KeyError, IndexError, TypeError):
                raise self._stop(expr, "fails") from None
        if isinstance(expr, ast.Compare) and len(expr.ops) == 1:
            return self._compare(expr)
        if isinstance(expr, ast.BoolOp):
            values = [self._truth(v) for v in expr.values]
            return all(values) if isinstance(expr.op, ast.And) else any(values)
        if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Not):
            return not self._truth(expr.operand)
        if isinstance(expr, ast.Call):
            return self._call(expr)
        raise self._stop(expr)

    def _name(self, expr: ast.Name) -> Any:
        if expr.id in self.env:
            return self.env[expr.id]
        if expr.id == "__name__":
            return self.mod.name
        if expr.id == "__package__":
            return self.mod.name if self.mod.is_package else self.mod.name.rpartition(".")[0]
        bindings = self.mod.scope.bindings.get(expr.id)
        if bindings and len(bindings) == 1 and bindings[0].kind == "assign":
            node = bindings[0].node
            if isinstance(node, (ast.Dict, ast.List, ast.Tuple, ast.Set)):
                return literal(node, f"{expr.id} in {self.mod.path}")
        return self.names.expr(self.mod, expr)

    def _global(self, key: Any, expr: ast.expr) -> Any:
        if not isinstance(key, str):
            raise self._stop(expr)
        found = self.names._scope_name(self.mod, self.mod.scope, key)
        if found is None:
            raise self._stop(expr, "fails")
        return found

    def _compare(self, expr: ast.Compare) -> bool:
        left, op, right = self._value(expr.left), expr.ops[0], self._value(expr.comparators[0])
        if right is _GLOBALS and isinstance(op, (ast.In, ast.NotIn)):
            if self.mod.scope.star_imports:
                raise self._stop(expr, "depends on star imports")
            inside = left in self.mod.scope.bindings
            return inside if isinstance(op, ast.In) else not inside
        plain = (bool, int, float, str, type(None), tuple, list, dict, set, frozenset)
        if not isinstance(left, plain) or not isinstance(right, plain):
            raise self._stop(expr, "depends on the run")
        if isinstance(op, ast.In):
            return left in right
        if isinstance(op, ast.NotIn):
            return left not in right
        if isinstance(op, (ast.Eq, ast.Is)):
            return left == right if isinstance(op, ast.Eq) else left is right
        if isinstance(op, (ast.NotEq, ast.IsNot)):
            return left != right if isinstance(op, ast.NotEq) else left is not right
        raise self._stop(expr)

    def _call(self, expr: ast.Call) -> Any:
        if any(isinstance(a, ast.Starred) for a in expr.args) or any(
            kw.arg is None for kw in expr.keywords
        ):
            raise self._stop(expr)
        func = self._value(expr.func)
        args = [self._value(a) for a in expr.args]
        kwargs = {kw.arg: self._value(kw.value) for kw in expr.keywords}
        if isinstance(func, _Method):
            if not all(isinstance(a, (str, int, type(None))) for a in [*args, *kwargs.values()]):
                raise self._stop(expr)
            return getattr(func.owner, func.name)(*args, **kwargs)
        qual = func.qualname if isinstance(func, Ext) else None
        if qual in _IMPORT_MODULE:
            target = args[0] if args else kwargs.get("name")
            package = args[1] if len(args) > 1 else kwargs.get("package")
            if not isinstance(target, str):
                raise self._stop(expr)
            return self.names._module_obj(_absolute_name(target, package, expr))
        if qual == "builtins.getattr" and len(args) == 2 and isinstance(args[1], str):
            if not isinstance(args[0], (Module, Ext, Class)):
                raise self._stop(expr)
            return self.names._getattr(args[0], args[1])
        if qual == "builtins.globals" and not args and not kwargs:
            return _GLOBALS
        raise self._stop(expr)


def _absolute_name(name: str, package: Any, node: ast.AST) -> str:
    """importlib's resolution of a relative module name against `package`."""
    if not name.startswith("."):
        return name
    if not isinstance(package, str):
        raise Unknown(f"relative import_module without a package (line {node.lineno})")  # type: ignore[attr-defined]
    level = len(name) - len(name.lstrip("."))
    found = resolve_relative(package, level, name[level:])
    if found is None:
        raise Unknown(f"relative import_module beyond the top package (line {node.lineno})")  # type: ignore[attr-defined]
    return found

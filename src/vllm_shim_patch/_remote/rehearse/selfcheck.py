"""Helpers for the stand-ins' self-checks: compare with vLLM's objects, never its source text."""

from typing import Any

import inspect
import types


def sig(fn):
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


def code_names(fn):
    """Every attribute and global name the function's code (and its nested functions) uses."""
    code = getattr(inspect.unwrap(fn), "__code__", None)
    names, todo = set(), [code] if code is not None else []
    while todo:
        c = todo.pop()
        names.update(c.co_names)
        todo.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
    return names


def runner_attrs_used(cls, methods):
    """`self.model_runner.X` attributes the given Worker methods use, read from their bytecode:
    every name loaded after `model_runner` in the instruction stream."""
    return attrs_used(cls, methods, "model_runner")


def attrs_used(cls, methods, holder):
    """{X: methods} for every `....holder.X` the given methods of `cls` load, from their bytecode."""
    import dis

    used: dict[str, Any] = {}
    for m in methods:
        fn = getattr(cls, m, None)
        code = getattr(inspect.unwrap(fn), "__code__", None) if fn is not None else None
        todo = [code] if code is not None else []
        while todo:
            c = todo.pop()
            todo.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
            prev = None
            for ins in dis.get_instructions(c):
                if ins.opname in ("LOAD_ATTR", "LOAD_METHOD", "STORE_ATTR"):
                    if prev == holder and ins.argval != holder:
                        used.setdefault(ins.argval, set()).add(m)
                    prev = ins.argval
                elif ins.opname not in ("CACHE", "EXTENDED_ARG", "PRECALL", "NOP"):
                    prev = None
    return used


def self_attrs(fn):
    """The attributes a method reads or writes on `self` (names loaded right after `self`)."""
    import dis

    code = getattr(inspect.unwrap(fn), "__code__", None)
    found = set()
    # A method whose nested functions capture `self` reads it as a cell (LOAD_DEREF), in its own
    # code and in theirs (vLLM 0.33's _update_states): both are walked.
    pending = [code] if code is not None else []
    while pending:
        code = pending.pop()
        after_self = False
        for ins in dis.get_instructions(code):
            if ins.opname in ("LOAD_ATTR", "LOAD_METHOD", "STORE_ATTR") and after_self:
                found.add(ins.argval)
            if ins.opname in ("CACHE", "EXTENDED_ARG", "PRECALL", "NOP"):
                continue
            after_self = (ins.opname in ("LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_LOAD_FAST", "LOAD_DEREF")
                          and ins.argval == "self")
        pending += [c for c in code.co_consts if hasattr(c, "co_code") and "self" in c.co_freevars]
    return found

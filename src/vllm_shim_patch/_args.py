"""Layout-preserving edits of a call's argument list (every byte outside the edit is kept)."""

from __future__ import annotations

import libcst as cst

_NO_SPACE = cst.SimpleWhitespace("")


def keyword_arg(name: str, value: cst.BaseExpression) -> cst.Arg:
    return cst.Arg(
        value=value,
        keyword=cst.Name(name),
        equal=cst.AssignEqual(whitespace_before=_NO_SPACE, whitespace_after=_NO_SPACE),
    )


def as_keyword(arg: cst.Arg, name: str) -> cst.Arg:
    """A positional argument rewritten as `name=value`, its comma and spacing kept."""
    return arg.with_changes(
        keyword=cst.Name(name),
        equal=cst.AssignEqual(whitespace_before=_NO_SPACE, whitespace_after=_NO_SPACE),
    )


def _separator(call: cst.Call) -> cst.Comma:
    """The comma that separates arguments in this call's own style (", " or ",\\n    ")."""
    args = call.args
    for arg in args[:-1]:
        if isinstance(arg.comma, cst.Comma):
            return arg.comma
    if len(args) == 1 and isinstance(args[0].comma, cst.Comma):
        # One argument with a trailing comma: a one-per-line call; the line after "(" has the indent.
        ws = call.whitespace_before_args
        if isinstance(ws, cst.ParenthesizedWhitespace):
            return cst.Comma(whitespace_before=_NO_SPACE, whitespace_after=ws)
    return cst.Comma(whitespace_before=_NO_SPACE, whitespace_after=cst.SimpleWhitespace(" "))


def append_arg(call: cst.Call, new: cst.Arg) -> cst.Call:
    args = list(call.args)
    if not args:
        return call.with_changes(args=[new])
    last = args[-1]
    sep = _separator(call)
    if isinstance(last.comma, cst.Comma):
        # Trailing comma: the new argument becomes last and keeps the closing layout.
        args[-1] = last.with_changes(comma=sep)
        args.append(new.with_changes(comma=last.comma, whitespace_after_arg=last.whitespace_after_arg))
    else:
        args[-1] = last.with_changes(comma=sep, whitespace_after_arg=_NO_SPACE)
        args.append(new.with_changes(whitespace_after_arg=last.whitespace_after_arg))
    return call.with_changes(args=args)


def remove_arg(call: cst.Call, index: int) -> cst.Call:
    args = list(call.args)
    gone = args.pop(index)
    if not args:
        return call.with_changes(args=[], whitespace_before_args=_NO_SPACE)
    if index == len(args):
        # The last argument went: the new last one takes over its trailing comma and layout.
        prev = args[-1]
        args[-1] = prev.with_changes(comma=gone.comma, whitespace_after_arg=gone.whitespace_after_arg)
    return call.with_changes(args=args)

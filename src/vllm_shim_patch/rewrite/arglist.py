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
    """The comma that separates arguments in this call's own style (", " or ",\\n    ").

    Only the layout is copied: a comment at the end of the line or on a line of its own
    belongs to the arguments it sits among, never to a new one.
    """
    args = call.args
    for arg in args[:-1]:
        if isinstance(arg.comma, cst.Comma):
            return _bare(arg.comma)
    if len(args) == 1 and isinstance(args[0].comma, cst.Comma):
        # One argument with a trailing comma: a one-per-line call; the line after "(" has the indent.
        ws = call.whitespace_before_args
        if isinstance(ws, cst.ParenthesizedWhitespace):
            return _bare(cst.Comma(whitespace_before=_NO_SPACE, whitespace_after=ws))
    return cst.Comma(whitespace_before=_NO_SPACE, whitespace_after=cst.SimpleWhitespace(" "))


def _bare(comma: cst.Comma) -> cst.Comma:
    ws = comma.whitespace_after
    if isinstance(ws, cst.ParenthesizedWhitespace):
        ws = ws.with_changes(first_line=cst.TrailingWhitespace(), empty_lines=[])
    return comma.with_changes(whitespace_after=ws)


def _has_comment(ws: cst.BaseParenthesizableWhitespace) -> bool:
    if not isinstance(ws, cst.ParenthesizedWhitespace):
        return False
    return ws.first_line.comment is not None or any(e.comment is not None for e in ws.empty_lines)


def _join(
    left: cst.BaseParenthesizableWhitespace, right: cst.BaseParenthesizableWhitespace, closing: bool
) -> cst.BaseParenthesizableWhitespace:
    """The whitespace left where an argument was, from the whitespace before and after it.

    Only the comment at the end of the removed argument's own line goes with it: the comment
    at the end of the line before it and comments on lines of their own are kept. ``closing``:
    the removed argument was the last one, so ")" follows.
    """
    if isinstance(left, cst.ParenthesizedWhitespace) and isinstance(right, cst.ParenthesizedWhitespace):
        return right.with_changes(first_line=left.first_line, empty_lines=[*left.empty_lines, *right.empty_lines])
    if isinstance(right, cst.ParenthesizedWhitespace):
        return right  # the removed argument shared its line with what came before: keep the line's end
    if isinstance(left, cst.ParenthesizedWhitespace):
        return right if closing and not _has_comment(left) else left
    return right if closing else left


def append_arg(call: cst.Call, new: cst.Arg) -> cst.Call:
    args = list(call.args)
    if not args:
        return call.with_changes(args=[new])
    last = args[-1]
    sep = _separator(call)
    tail = last.comma.whitespace_after if isinstance(last.comma, cst.Comma) else last.whitespace_after_arg
    if isinstance(sep.whitespace_after, cst.ParenthesizedWhitespace) and isinstance(
        tail, cst.ParenthesizedWhitespace
    ):
        # One argument per line: the comment at the end of the last argument's line stays there.
        sep = sep.with_changes(whitespace_after=sep.whitespace_after.with_changes(first_line=tail.first_line))
        tail = tail.with_changes(first_line=cst.TrailingWhitespace())
    if isinstance(last.comma, cst.Comma):
        # Trailing comma: the new argument becomes last and keeps the closing layout.
        args[-1] = last.with_changes(comma=sep)
        args.append(new.with_changes(comma=last.comma.with_changes(whitespace_after=tail)))
    else:
        args[-1] = last.with_changes(comma=sep, whitespace_after_arg=_NO_SPACE)
        args.append(new.with_changes(whitespace_after_arg=tail))
    return call.with_changes(args=args)


def remove_arg(call: cst.Call, index: int) -> cst.Call:
    """The call without its argument at ``index``; see `_join` for where comments go."""
    args = list(call.args)
    gone = args.pop(index)
    closing = index == len(args)
    after = gone.comma.whitespace_after if isinstance(gone.comma, cst.Comma) else gone.whitespace_after_arg
    if index == 0:
        joined = _join(call.whitespace_before_args, after, closing)
        if not args and not _has_comment(joined):
            joined = _NO_SPACE
        return call.with_changes(args=args, whitespace_before_args=joined)
    prev = args[index - 1]
    assert isinstance(prev.comma, cst.Comma)  # it was followed by `gone`
    joined = _join(prev.comma.whitespace_after, after, closing)
    if closing and not isinstance(gone.comma, cst.Comma):
        # The last argument went with no trailing comma: the new last one has none either.
        args[-1] = prev.with_changes(comma=cst.MaybeSentinel.DEFAULT, whitespace_after_arg=joined)
    else:
        args[index - 1] = prev.with_changes(comma=prev.comma.with_changes(whitespace_after=joined))
    return call.with_changes(args=args)

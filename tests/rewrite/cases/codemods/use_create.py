"""A test codemod: `X(...)` becomes `X.create(...)`; `boom=` fails the file, `ask=` needs a human."""

import libcst as cst

from vllm_shim_patch.rewrite.context import NeedsHuman


def rewrite(call, site):
    keywords = [a.keyword.value for a in call.args if a.keyword is not None]
    if "boom" in keywords:
        raise ValueError("cannot handle boom")
    if "ask" in keywords:
        raise NeedsHuman("ask a human")
    if isinstance(call.func, cst.Attribute) and call.func.attr.value == "create":
        return call
    site.edits.append("call X.create")
    return call.with_changes(func=cst.Attribute(call.func, cst.Name("create")))

"""Load the tokenizer with trust_remote_code=True, as the config already is (opt-in).

speculators (0.3.0, 0.4.0, 0.4.0.1) calls `AutoConfig.from_pretrained(model_path,
trust_remote_code=True)` but `AutoTokenizer.from_pretrained(model_path)`: a model whose tokenizer
is remote code (Kimi-K2.5) fails at the generator's init. Running a model's own code is the
user's decision, so the rule runs only with --trust-remote-code.

Acts on `AutoTokenizer.from_pretrained(...)` calls with no `trust_remote_code` and no splat.
"""

from __future__ import annotations

import libcst as cst

from vllm_shim_patch.rewrite.scoped import ScopedTransform, dotted


class Codemod(ScopedTransform):
    region_only = True  # acts on its region's own node

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.Call:
        if not self.in_scope or dotted(updated_node.func) != "AutoTokenizer.from_pretrained":
            return updated_node
        names = {a.keyword.value for a in updated_node.args if a.keyword is not None}
        if "trust_remote_code" in names:
            return updated_node
        if any(a.star for a in updated_node.args):
            self.needs_human(original_node, "a ** or * argument may pass trust_remote_code already: "
                                            "add trust_remote_code=True by hand")
            return updated_node
        args = list(updated_node.args)
        last = args[-1] if args else None
        if last is not None and last.comma is cst.MaybeSentinel.DEFAULT:
            args[-1] = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        args.append(cst.Arg(keyword=cst.Name("trust_remote_code"), value=cst.Name("True"),
                            equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                                                  whitespace_after=cst.SimpleWhitespace(""))))
        self.edited(original_node, "load the tokenizer with trust_remote_code=True, like the config")
        return updated_node.with_changes(args=args)

"""The libcst contender: the three edits `patch-speculators --vllm-version 0.17` makes.

    PYTHONPATH=bench python -m libcst.tool codemod -x --no-format -u 3 --hide-progress \
        libcst_codemod.speculators_vllm017.SpeculatorsVllm017 <site-packages>/speculators

`-u/--unified-diff` prints the diff to stdout instead of writing the files; `--no-format` skips
the formatter (black). Calls are matched like the tool matches them: by fully qualified name
through the imports (QualifiedNameProvider), so a same-named callable from elsewhere is left
alone.

  1. vllm.v1.core.kv_cache_utils.get_kv_cache_config_from_groups: drop kv_cache_specs
  2. vllm.v1.core.sched.scheduler.Scheduler: add block_size=<vllm_config>.cache_config.block_size
  3. vllm.v1.request.Request: drop eos_token_id
"""

from __future__ import annotations

import libcst as cst
from libcst.codemod import VisitorBasedCodemodCommand
from libcst.metadata import QualifiedNameProvider, QualifiedNameSource

DROP = {
    "vllm.v1.core.kv_cache_utils.get_kv_cache_config_from_groups": "kv_cache_specs",
    "vllm.v1.request.Request": "eos_token_id",
}
SCHEDULER = "vllm.v1.core.sched.scheduler.Scheduler"
NO_SPACE = cst.SimpleWhitespace("")


def _keyword(arg: cst.Arg) -> str | None:
    return arg.keyword.value if arg.keyword is not None else None


def drop_keyword(call: cst.Call, name: str) -> cst.Call:
    args = list(call.args)
    for i, arg in enumerate(args):
        if _keyword(arg) == name:
            del args[i]
            if i == len(args) and args:  # dropped the last one: its comma (or none) moves up
                args[-1] = args[-1].with_changes(comma=arg.comma)
            return call.with_changes(args=args)
    return call


def add_keyword(call: cst.Call, name: str, value: cst.BaseExpression) -> cst.Call:
    args = list(call.args)
    new = cst.Arg(keyword=cst.Name(name), value=value,
                  equal=cst.AssignEqual(whitespace_before=NO_SPACE, whitespace_after=NO_SPACE))
    if args and isinstance(args[-1].comma, cst.Comma):  # magic trailing comma: same layout again
        before = args[-2].comma if len(args) > 1 else cst.Comma(whitespace_after=call.whitespace_before_args)
        new = new.with_changes(comma=args[-1].comma)
        args[-1] = args[-1].with_changes(comma=before)
    elif args:
        args[-1] = args[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    return call.with_changes(args=[*args, new])


class SpeculatorsVllm017(VisitorBasedCodemodCommand):
    DESCRIPTION = "speculators 0.3.0 on vLLM 0.17: the three call-site edits of patch-speculators."
    METADATA_DEPENDENCIES = (QualifiedNameProvider,)

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        names = {
            q.name
            for q in self.get_metadata(QualifiedNameProvider, original_node.func, set())
            if q.source is QualifiedNameSource.IMPORT
        }
        for qualname, keyword in DROP.items():
            if qualname in names:
                return drop_keyword(updated_node, keyword)
        if SCHEDULER in names and not any(_keyword(a) == "block_size" for a in updated_node.args):
            config = next((a.value for a in updated_node.args if _keyword(a) == "vllm_config"), None)
            if config is None and updated_node.args and updated_node.args[0].keyword is None \
                    and not updated_node.args[0].star:
                config = updated_node.args[0].value  # (vllm_config, kv_cache_config, ...) positionally
            if config is None:
                return updated_node  # nothing to build block_size from: left for a human
            if not isinstance(config, (cst.Name, cst.Attribute, cst.Call, cst.Subscript)):
                config = config.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
            value = cst.Attribute(value=cst.Attribute(value=config, attr=cst.Name("cache_config")),
                                  attr=cst.Name("block_size"))
            return add_keyword(updated_node, "block_size", value)
        return updated_node

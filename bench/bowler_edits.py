"""The Bowler contender: the three edits `patch-speculators --vllm-version 0.17` makes, diff only.

Run with an interpreter that has Bowler (bench_dryrun.py builds a cached venv for it):

    <bowler-venv>/bin/python bench/bowler_edits.py <site-packages>/speculators [--mode exact|builtin]

It prints the unified diff and writes nothing (`execute(write=False, interactive=False)`).

The edits (vLLM 0.17, as the tool's bundled rules make them):
  1. get_kv_cache_config_from_groups(...): drop the keyword kv_cache_specs
  2. Scheduler(...): add block_size=<its vllm_config argument>.cache_config.block_size
  3. Request(...): drop the keyword eos_token_id

`--mode builtin` uses only Bowler's argument modifiers. They cannot express these edits exactly:
  * `remove_argument` works, but `FunctionSpec.explode()` re-renders the whole argument list and
    drops the magic trailing comma (`available_memory=cache_memory,` loses its comma);
  * `add_argument(..., positional=False)` only changes function *definitions*: at call sites a
    keyword argument is never added (Bowler 0.9.0, query.py add_argument_transform has no
    branch for it), and the value is a single `Name` leaf, so an expression built from the call's
    own `vllm_config` argument cannot be written; the Scheduler call is only re-rendered;
  * `remove_argument` insists on "the original function" for inspect.signature, so stubs with
    vLLM 0.11's signatures stand in (vLLM is not installed here).

`--mode exact` (the default, and the one compared in the headline) is the closest equivalent:
the same Bowler queries (`select_function(...)`), with `.modify()` callbacks doing the argument
surgery on the fissix tree, keeping trailing commas and layout. Its diff is checked against ours
by bench_dryrun.py.

Like every Bowler selector, `select_function` matches by bare name: any call spelled
`Request(...)` is a candidate, wherever `Request` comes from (the tool resolves imports instead).
"""

from __future__ import annotations

import argparse
import sys

from bowler import Query
from fissix import pytree
from fissix.fixer_util import Comma, Dot, LParen, Name, RParen
from fissix.pgen2 import token
from fissix.pygram import python_symbols as syms

KV_CACHE = "get_kv_cache_config_from_groups"


# Stubs with vLLM 0.11's signatures: Bowler's remove_argument inspects "the original function".
def get_kv_cache_config_from_groups(vllm_config, kv_cache_groups, kv_cache_specs, available_memory):
    raise NotImplementedError


def Scheduler(vllm_config, kv_cache_config, structured_output_manager, block_size=None):
    raise NotImplementedError


class Request:
    def __init__(self, request_id, prompt_token_ids, sampling_params, pooling_params, eos_token_id,
                 arrival_time=None):
        raise NotImplementedError


# --------------------------------------------------------------------------- exact: fissix surgery


def _arglist(capture: dict) -> pytree.Node | None:
    """The call's argument list as an `arglist` node (created for a lone argument), or None for
    a definition, an import or an empty call."""
    if "function_call" not in capture:
        return None
    trailer = capture.get("function_parameters")
    if trailer is None or len(trailer.children) != 3:
        return None
    inner = trailer.children[1]
    if inner.type != syms.arglist:
        lone = inner.clone()
        wrapper = pytree.Node(syms.arglist, [lone])
        inner.replace(wrapper)
        inner = wrapper
    return inner


def _keyword(arg: pytree.Base) -> str | None:
    if arg.type == syms.argument and len(arg.children) == 3 and arg.children[1].type == token.EQUAL:
        first = arg.children[0]
        if first.type == token.NAME:
            return first.value
    return None


def drop_keyword(name: str):
    def callback(node, capture, filename):
        arglist = _arglist(capture)
        if arglist is None:
            return
        for arg in list(arglist.children):
            if _keyword(arg) != name:
                continue
            nxt, prev = arg.next_sibling, arg.prev_sibling
            if nxt is not None and nxt.type == token.COMMA:
                following = nxt.next_sibling
                nxt.remove()
            else:  # the last argument, no trailing comma: take the comma before it
                following = None
                if prev is not None and prev.type == token.COMMA:
                    prev.remove()
            prefix = arg.prefix
            arg.remove()
            if following is not None:
                following.prefix = prefix  # the next argument starts where the dropped one did
            return

    return callback


def add_keyword_from(name: str, source: str, position: int, attrs: tuple[str, ...]):
    """Add `name=<the call's `source` argument>.<attrs...>` (skipped if `name` is present or the
    source argument cannot be found: a human decides)."""

    def callback(node, capture, filename):
        arglist = _arglist(capture)
        if arglist is None:
            return
        args = [c for c in arglist.children if c.type != token.COMMA]
        if any(_keyword(a) == name for a in args):
            return
        value = next((a.children[2] for a in args if _keyword(a) == source), None)
        if value is None:
            positional = [a for a in args if _keyword(a) is None and a.type != syms.argument]
            if len(positional) <= position:
                return
            value = positional[position]
        base = value.clone()
        base.prefix = ""
        if base.type == syms.power and not any(c.type == token.DOUBLESTAR for c in base.children):
            parts = [c.clone() for c in base.children]  # `self.vllm_config` + trailers
        elif base.type in (token.NAME, syms.atom):
            parts = [base]
        else:  # a lower-precedence expression: parenthesise
            parts = [pytree.Node(syms.atom, [LParen(), base, RParen()])]
        for attr in attrs:
            parts.append(pytree.Node(syms.trailer, [Dot(), Name(attr)]))
        expr = pytree.Node(syms.power, parts)
        new = pytree.Node(syms.argument, [Name(name), pytree.Leaf(token.EQUAL, "="), expr])
        last = arglist.children[-1]
        if last.type == token.COMMA:  # magic trailing comma: one more argument in the same layout
            new.prefix = args[-1].prefix if args else ""
            arglist.append_child(new)
            arglist.append_child(Comma())
        else:
            new.prefix = last.prefix if "\n" in last.prefix else " "
            arglist.append_child(Comma())
            arglist.append_child(new)

    return callback


def exact_query(path: str) -> Query:
    return (
        Query(path)
        .select_function(KV_CACHE).is_call().modify(drop_keyword("kv_cache_specs"))
        .select_function("Scheduler").is_call()
        .modify(add_keyword_from("block_size", "vllm_config", 0, ("cache_config", "block_size")))
        .select_function("Request").is_call().modify(drop_keyword("eos_token_id"))
    )


def builtin_query(path: str) -> Query:
    return (
        Query(path)
        .select_function(get_kv_cache_config_from_groups).remove_argument("kv_cache_specs")
        .select_function(Scheduler).add_argument("block_size", "self.vllm_config.cache_config.block_size")
        .select_function(Request).remove_argument("eos_token_id")
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path", help="the installed package folder (…/site-packages/speculators)")
    parser.add_argument("--mode", choices=("exact", "builtin"), default="exact")
    args = parser.parse_args()
    query = exact_query(args.path) if args.mode == "exact" else builtin_query(args.path)
    # Bowler's .diff(): print the hunks, write nothing, ask nothing.
    query.execute(write=False, interactive=False, silent=False)
    if query.exceptions:
        for exc in query.exceptions:
            print(f"bowler: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return query.retcode or 0


if __name__ == "__main__":
    sys.exit(main())

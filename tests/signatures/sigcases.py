"""What the signature suites share: the fixture tree and its expected answers (the static and
the live suite check the same rows), and helpers that write signatures and calls as Python text.
"""

from __future__ import annotations

import ast
from pathlib import Path

from vllm_shim_patch.signatures import BindResult, Signature

TREE = Path(__file__).parent.parent / "fixtures" / "sigtree"


def render(sig: Signature | None) -> str | None:
    """Python-like parameter text: `a, b=, /, c, *args, d, **kwargs` (`=` marks a default)."""
    if sig is None:
        return None
    out: list[str] = []
    kinds = [p.kind for p in sig.params]
    for i, p in enumerate(sig.params):
        if p.kind == "keyword_only" and "var_positional" not in kinds and "*" not in out:
            out.append("*")
        text = {"var_positional": "*", "var_keyword": "**"}.get(p.kind, "") + p.name
        out.append(text + ("" if p.required or p.kind.startswith("var_") else "="))
        if p.kind == "positional_only" and (
            i + 1 == len(kinds) or kinds[i + 1] != "positional_only"
        ):
            out.append("/")
    return ", ".join(out)


def bind_call(sig: Signature, arguments: str) -> BindResult:
    """Bind the arguments of a call written as Python (`1, x=2, *rest`)."""
    call = ast.parse(f"f({arguments})", mode="eval").body
    assert isinstance(call, ast.Call)
    return sig.bind(
        sum(not isinstance(a, ast.Starred) for a in call.args),
        [kw.arg for kw in call.keywords if kw.arg is not None],
        star_args=any(isinstance(a, ast.Starred) for a in call.args),
        star_kwargs=any(kw.arg is None for kw in call.keywords),
    )


# (qualname, parameters); test_live.py checks every row against the imported tree too.
RESOLVED = [
    # functions
    ("vllm.funcs.plain", "a, b=, *, c, d="),
    ("vllm.funcs.posonly", "a, b, /, c, *args, d, **kwargs"),
    ("vllm.funcs.star", "*args, **kwargs"),
    ("vllm.funcs.coro", "x, y="),
    ("vllm.funcs.cached", "key"),
    ("vllm.funcs.cached_bare", "key, other="),
    ("vllm.funcs.over", "x, flag="),  # the implementation, not the @overload variants
    ("vllm.funcs.alias", "a, b=, *, c, d="),
    # re-exports
    ("vllm.reexport.Thing", "size, *, color="),
    ("vllm.reexport.renamed_helper", "x, /, y="),
    ("vllm.reexport.impl_mod.Thing", "size, *, color="),
    ("vllm.reexport.funcs_mod.plain", "a, b=, *, c, d="),
    ("vllm.reexport.chained", "a, b=, *, c, d="),
    ("vllm.reexport.starred", "q"),
    ("vllm.reexport.fallback", "a, b=, *, c, d="),
    ("vllm.reexport.Alias", "size, *, color="),
    ("vllm.reexport.AttrAlias", "*args, **kwargs"),
    ("vllm.reexport.DeepAlias", "a, b=, *, flag="),
    ("vllm.shadow.starred", "a, b=, *, c, d="),
    ("vllm.star_chain.starred", "q"),
    ("vllm.star_chain.Thing", "size, *, color="),
    # lazy exports through a module __getattr__
    ("vllm.lazy.Lazy", "a, b=, *, flag="),
    ("vllm.lazy.old_helper", "*args, **kwargs"),
    ("vllm.lazy.Job", "*, name, retries=, tags="),
    ("vllm.lazy.plain", "a, b=, *, c, d="),
    ("vllm.lazy.Point", "x, y=, scale=, cache="),
    # classes and inheritance
    ("vllm.classes.NoInit", ""),
    ("vllm.classes.Base", "a, b=, *, flag="),
    ("vllm.classes.Child", "a, b=, *, flag="),
    ("vllm.classes.GrandChild", "a, b=, *, flag="),
    ("vllm.classes.Override", "x"),
    ("vllm.classes.Multi", "x"),
    ("vllm.classes.Diamond", "x"),
    ("vllm.classes.WithNew", "size, *, name="),
    ("vllm.classes.Box", "item, *rest"),
    ("vllm.classes.Abstract", "n"),
    ("vllm.classes.Concrete", "n"),
    ("vllm.classes.WithAbcMeta", "q"),
    ("vllm.classes.Methods", ""),
    ("vllm.classes.Methods.method", "self, a, b="),
    ("vllm.classes.Methods.build", "spec, *, strict="),
    ("vllm.classes.Methods.helper", "x, y"),
    ("vllm.classes.Methods.Inner", "z"),
    ("vllm.classes.Child.__init__", "self, a, b=, *, flag="),
    ("vllm.layers.Layer", "dim, *, bias="),
    ("vllm.layers.SubLayer", "dim, *, bias="),
    ("vllm.classes.Failure", "message, *, code="),
    ("vllm.classes.SubFailure", "message, *, code="),
    # stdlib dataclasses
    ("vllm.dc.Point", "x, y=, scale=, cache="),
    ("vllm.dc.Point3", "x=, y=, scale=, cache=, z="),
    ("vllm.dc.NotADataclass", "x, y=, scale=, cache="),
    ("vllm.dc.Options", "verbose=, *, name, level="),
    ("vllm.dc.Sentinel", "a, *, b, c="),
    ("vllm.dc.FieldKw", "a, c=, *, b"),
    ("vllm.dc.RequiredInitVar", "mode, ratio="),
    ("vllm.dc.ExplicitInit", "only"),
    ("vllm.dc.NoGeneratedInit", "base_arg"),
    ("vllm.dc.FromPlainBase", "a="),
    ("vllm.dc.KwBase", "*, k, j="),
    ("vllm.dc.AfterKwBase", "p, *, k, j="),
    # PEP 681 dataclass_transform
    ("vllm.transform.Job", "*, name, retries=, tags="),
    ("vllm.transform.Positional", "a, b=, *, c="),
    # pydantic dataclasses, vLLM's @config pattern
    (
        "vllm.pyd.SchedulerLike",
        "max_model_len, is_encoder_decoder, runner_type=, max_num_seqs=, policy=, _private=",
    ),
    ("vllm.pyd.DeviceLike", "device="),
    ("vllm.pyd.AllowsExtra", "a=, **extra_data"),
    ("vllm.pyd.Loose", "a, b=, *, c, **ignored_extra"),
    ("vllm.pyd.Strict", "*, a=, b"),
    # a pass-through decorator over a dataclass (vLLM 0.10-0.15's @config)
    ("vllm.passthru.PydOld", "a=, b=, c=, d=, **ignored_extra"),
    ("vllm.passthru.PydOldStrict", "size="),
    ("vllm.passthru.StdOld", "x, y="),
    ("vllm.passthru.Called", "x="),
    ("vllm.passthru.Linted", "req_id, n="),  # vLLM's @bc_linter_include
    ("vllm.passthru.linted", "a, *, b="),
    ("vllm.passthru.Methods.run", "self, q"),
    # typing.NamedTuple
    ("vllm.ntuple.Pair", "left, right=, label="),
    ("vllm.ntuple.SubPair", "left, right=, label="),
    ("vllm.ntuple.Boxed", "item, count="),
    ("vllm.ntuple.Pair.swapped", "self"),
    # msgspec.Struct, vLLM's SamplingParams pattern
    ("vllm.structs.Params", "n=, temperature=, _hidden=, renamed="),
    ("vllm.structs.KwParams", "*, x=, y"),
    ("vllm.structs.SubKw", "z, w=, *, x=, y"),
    ("vllm.structs.WithClassVarMixin", "b=, c="),
]

# (qualname, part of the reason); static reading must not guess these.
UNKNOWN = [
    ("vllm.funcs.only_overloads", "only @overload variants"),
    ("vllm.funcs.wrapped", "decorator @_wrap on wrapped may change its signature"),
    ("vllm.funcs.rebound", "'rebound' is bound 2 times"),
    ("vllm.reexport.either", "'either' is bound 2 times"),
    ("vllm.reexport.hidden", "does not define 'hidden'"),
    ("vllm.lazy.Chosen", "module __getattr__ in vllm/lazy.py: os.environ.get('LAZY_PICK')"),
    ("vllm.lazy.Gone", "vllm/dc.py does not define 'Gone'"),
    ("vllm.lazy.Nothing", "vllm/lazy.py does not define 'Nothing' (its __getattr__ raises"),
    ("vllm.shadow_late.starred", "is bound and also star-imported after"),
    ("vllm.cycle_a.Loop", "refers back to itself"),
    ("vllm.classes.FromExternal", "collections.OrderedDict, whose constructor is not known"),
    ("vllm.classes.Registered", "class decorator @register"),
    ("vllm.layers.NoInitLayer", "constructed by the __init__ of torch.nn.Module"),
    ("vllm.classes.BareFailure", "constructed by the __init__ of builtins.ValueError"),
    ("vllm.classes.DecoratedInit", "decorator @_log_calls on __init__"),
    ("vllm.classes.WithMeta", "metaclass Meta"),
    ("vllm.classes.NewAndInit", "both __new__ and __init__"),
    ("vllm.classes.Methods.value", "bound 2 times"),
    ("vllm.passthru.Touched", "class decorator @touches on vllm.passthru.Touched may replace"),
    ("vllm.passthru.Wrapped", "class decorator @wrapping(flag=True) on vllm.passthru.Wrapped may"),
    ("vllm.ntuple.NewOnSub", "vllm.ntuple.NewOnSub defines __new__ over a NamedTuple"),
    ("vllm.pyd.Aliased", "renames the constructor keyword"),
    ("vllm.pyd.OwnInit", "pydantic dataclass vllm.pyd.OwnInit defines __init__"),
    ("vllm.pyd.AnnotatedDefault", "has a Field(...) inside Annotated[...]"),
    ("vllm.structs.WithAnnotatedMixin", "mixin vllm.structs.AnnotatedMixin"),
    ("vllm.invalid.RequiredAfterDefault", "required field 'b' follows a field with a default"),
    ("vllm.invalid.StructWithInit", "defines __init__ next to msgspec.Struct"),
    ("vllm.invalid.SelfBase", "inherits from itself"),
    ("vllm.nowhere.f", "does not define 'nowhere'"),
    ("os.path.join", "no module"),
    ("vllm.reexport", "is a module"),
]

# (qualname, parameters) of methods as called on an instance (StaticSignatures.get_bound).
BOUND = [
    ("vllm.classes.Methods.method", "a, b="),
    ("vllm.classes.Methods.build", "spec, *, strict="),  # a classmethod binds cls
    ("vllm.classes.Methods.helper", "x, y"),  # a staticmethod binds nothing
    ("vllm.classes.Methods.Inner", "z"),
    ("vllm.classes.Multi.helper", ""),  # inherited from Mixin
    ("vllm.classes.Concrete.run", ""),
    ("vllm.classes.GrandChild.__init__", "a, b=, *, flag="),
    ("vllm.ntuple.SubPair.swapped", ""),
]
BOUND_UNKNOWN = [
    ("vllm.classes.Methods.value", "bound 2 times"),
    ("vllm.classes.Methods.nothing", "vllm.classes.Methods has no attribute 'nothing'"),
    ("vllm.funcs.plain.x", "vllm.funcs.plain is not a class"),
    ("vllm.funcs.wrapped", "vllm.funcs is not a class"),
]

# (qualname, exists, part of the reason) for StaticSignatures.exists.
# What the one existence engine (static/members.py, the audit's) answers: (qualname, on_instance,
# declared, found, part of the reason). Read off a copy of TREE with a RECORD that lists compiled
# modules (test_static.py), so a name no source defines is surely absent.
EXISTS = [
    ("vllm.enums", False, False, True, ""),
    ("vllm.enums.Status", False, False, True, ""),
    ("vllm.enums.Status.FINISHED_ABORTED", False, False, True, ""),
    ("vllm.enums.Status.is_finished", False, False, True, ""),
    ("vllm.enums.Status.value", False, False, True, ""),  # from enum.IntEnum
    ("vllm.enums.Status.FINISHED_LENGTH", False, False, False, "vllm.enums.Status has no attribute 'FINISHED_LENGTH'"),
    ("vllm.enums.Fields.count", False, False, True, ""),
    ("vllm.enums.Fields.missing", False, False, False, "vllm.enums.Fields has no attribute 'missing'"),
    ("vllm.enums.Worker.rank_in_group", True, False, True, ""),  # self.rank_in_group = ...
    ("vllm.enums.Worker.rank_in_group", False, False, False, "vllm.enums.Worker has no attribute 'rank_in_group'"),
    ("vllm.enums.Worker.slot", True, False, True, ""),
    ("vllm.enums.Worker.LIMIT", False, False, True, ""),
    ("vllm.enums.Worker.__init__", False, False, True, ""),
    ("vllm.enums.Worker.nothing", True, True, False,
     "instance of vllm.enums.Worker has no attribute 'nothing' (nor does any class of this vLLM)"),
    ("vllm.enums.Dynamic.anything", True, False, None, "vllm.enums.Dynamic defines __getattr__"),
    ("vllm.enums.Dynamic.anything", False, False, False, "vllm.enums.Dynamic has no attribute 'anything'"),
    # Set from outside the class: an object only annotated as Worker may have it.
    ("vllm.enums.Worker.tagged_later", True, True, None, "a subclass may define it (vllm.enums does)"),
    ("vllm.enums.Worker.named_later", True, True, None, "a subclass may define it (vllm.enums does)"),
    ("vllm.enums.Worker.tagged_later", True, False, False,
     "instance of vllm.enums.Worker has no attribute 'tagged_later'"),
    ("vllm.classes.FromExternal.popitem", False, False, True, ""),  # collections.OrderedDict's, asked
    ("vllm.lazy.Job", False, False, True, ""),
    ("vllm.lazy.Nothing", False, False, False, "vllm/lazy.py does not define 'Nothing'"),
    ("vllm.lazy.Chosen", False, False, None, "os.environ.get('LAZY_PICK')"),
    ("vllm.reexport.Thing", False, False, True, ""),
    ("vllm.reexport.hidden", False, False, False, "vllm/reexport/__init__.py does not define 'hidden'"),
    ("vllm.nowhere", False, False, False, "vllm has no name 'nowhere'"),
    ("vllm.nowhere.f", False, False, False, "vllm has no name 'nowhere'"),
    ("vllm.ntuple.Pair.left", False, False, True, ""),
    ("vllm.ntuple.Pair._replace", False, False, True, ""),  # generated for every NamedTuple
    ("vllm.ntuple.Pair._replace", True, False, True, ""),
    ("vllm.ntuple.Pair.nothing", False, False, False, "vllm.ntuple.Pair has no attribute 'nothing'"),
]

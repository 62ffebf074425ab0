"""model.py: binding a call to a Signature, accepts/requires, and the SignatureSource protocol."""

from __future__ import annotations

import json
import sys

import pytest
from sigcases import TREE, bind_call

from vllm_shim_patch.signatures import (
    BindResult,
    LiveSignatures,
    Param,
    Signature,
    SignatureSource,
    StaticSignatures,
)
from vllm_shim_patch.kinds import BindStatus
from vllm_shim_patch.report.binding import bind_reason
from vllm_shim_patch.signatures.model import MULTIPLE, POSITIONAL_AS_KEYWORD

REQUEST_017 = Signature(
    "vllm.v1.request.Request",
    (
        Param("request_id", "positional_or_keyword", True),
        Param("prompt_token_ids", "positional_or_keyword", True),
        Param("sampling_params", "positional_or_keyword", True),
        Param("pooling_params", "positional_or_keyword", True),
        Param("client_index", "positional_or_keyword", False),
        Param("arrival_time", "positional_or_keyword", False),
    ),
    "vllm/v1/request.py:60",
)
POSONLY = Signature(
    "f",
    (
        Param("x", "positional_only", True),
        Param("y", "positional_or_keyword", False),
        Param("z", "keyword_only", True),
    ),
    "m.py:1",
)
KWARGS = Signature(
    "g", (Param("a", "positional_or_keyword", True), Param("kw", "var_keyword", False)), "live"
)
POSONLY_KWARGS = Signature(
    "p", (Param("x", "positional_only", True), Param("kw", "var_keyword", False)), "live"
)
VARARGS = Signature(
    "h", (Param("a", "positional_or_keyword", True), Param("rest", "var_positional", False)), "live"
)

REQ4 = "request_id=r, prompt_token_ids=p, sampling_params=s, pooling_params=None"
BIND = [
    # (id, signature, the call's arguments, status, reason)
    ("ok", REQUEST_017, REQ4, "ok", ""),
    ("unexpected", REQUEST_017, REQ4 + ", eos_token_id=e", "mismatch",
     "unexpected keyword argument 'eos_token_id'"),
    ("missing-one", REQUEST_017, "request_id=r, prompt_token_ids=p, sampling_params=s", "mismatch",
     "missing required argument 'pooling_params'"),
    ("missing-two", REQUEST_017, "r, p", "mismatch",
     "missing required arguments 'sampling_params', 'pooling_params'"),
    ("too-many", REQUEST_017, "1, 2, 3, 4, 5, 6, 7", "mismatch",
     "too many positional arguments (7 given, 6 accepted)"),
    ("twice", REQUEST_017, "r, " + REQ4, "mismatch", "multiple values for argument 'request_id'"),
    ("positional-ok", REQUEST_017, "1, 2, 3, 4, 5, 6", "ok", ""),
    ("posonly-by-keyword", POSONLY, "x=1, z=1", "mismatch",
     "positional-only argument 'x' passed as keyword"),
    ("posonly-ok", POSONLY, "1, 2, z=3", "ok", ""),
    ("kwonly-missing", POSONLY, "1, 2", "mismatch", "missing required argument 'z'"),
    ("kwargs-take-any", KWARGS, "1, anything=2, other=3", "ok", ""),
    ("kwargs-take-posonly-name", POSONLY_KWARGS, "1, x=2", "ok", ""),
    ("varargs-take-many", VARARGS, "1, 2, 3, 4, 5, 6, 7, 8, 9", "ok", ""),
    ("star-args", REQUEST_017, "r, *rest", "unknown", "*args/**kwargs at the call"),
    ("star-kwargs", REQUEST_017, "request_id=r, **rest", "unknown", "*args/**kwargs at the call"),
    ("star-still-unexpected", REQUEST_017, "eos_token_id=e, **rest", "mismatch",
     "unexpected keyword argument 'eos_token_id'"),
    ("star-still-too-many", REQUEST_017, "1, 2, 3, 4, 5, 6, 7, *rest", "mismatch",
     "too many positional arguments (7 given, 6 accepted)"),
    ("star-args-cannot-fill-kwonly", POSONLY, "*rest", "mismatch", "missing required argument 'z'"),
    ("star-kwargs-cannot-fill-posonly", POSONLY, "**rest", "mismatch",
     "missing required argument 'x'"),
    # Every keyword to drop and every argument to add, in one reason (vLLM 0.10.0's Request).
    ("posonly-and-unexpected", POSONLY, "1, x=2, zz=3", "mismatch",
     "positional-only argument 'x' passed as keyword; unexpected keyword argument 'zz'; "
     "missing required argument 'z'"),
    ("unexpected-and-missing", REQUEST_017, "request_id=r, prompt_token_ids=p, block_hasher=h, eos_token_id=e",
     "mismatch", "unexpected keyword arguments 'block_hasher', 'eos_token_id'; "
     "missing required arguments 'sampling_params', 'pooling_params'"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("sig", "arguments", "status", "reason"),
    [row[1:] for row in BIND],
    ids=[row[0] for row in BIND],
)
def test_bind(sig: Signature, arguments: str, status: str, reason: str) -> None:
    result = bind_call(sig, arguments)
    assert (result.status, bind_reason(result)) == (status, reason)
    assert result.status is BindStatus(status)  # the enum, not its string
    assert json.dumps(result.status) == json.dumps(status)  # and JSON says the same as before


@pytest.mark.parametrize(("sig", "arguments", "expected"), [
    pytest.param(REQUEST_017, REQ4, BindResult(BindStatus.OK), id="ok"),
    pytest.param(REQUEST_017, "request_id=r, prompt_token_ids=p, block_hasher=h, eos_token_id=e",
                 BindResult(BindStatus.MISMATCH, unexpected=("block_hasher", "eos_token_id"),
                            missing=("sampling_params", "pooling_params")), id="unexpected-and-missing"),
    pytest.param(POSONLY, "1, x=2, zz=3", BindResult(
        BindStatus.MISMATCH, unexpected=("zz",), missing=("z",), keyword_problems=((POSITIONAL_AS_KEYWORD, "x"),)),
        id="posonly"),
    pytest.param(REQUEST_017, "r, p, s, None, request_id=r", BindResult(
        BindStatus.MISMATCH, keyword_problems=((MULTIPLE, "request_id"),)), id="multiple"),
    pytest.param(REQUEST_017, "1, 2, 3, 4, 5, 6, 7", BindResult(BindStatus.MISMATCH, too_many=(7, 6)), id="too-many"),
    pytest.param(KWARGS, "1, **kw", BindResult(BindStatus.UNKNOWN, splat=True), id="splat"),
])
def test_bind_problems_are_data(sig: Signature, arguments: str, expected: BindResult) -> None:
    result = bind_call(sig, arguments)
    assert result == expected
    assert result.multiple == tuple(n for w, n in expected.keyword_problems if w == MULTIPLE)
    assert result.positional_only == tuple(n for w, n in expected.keyword_problems if w == POSITIONAL_AS_KEYWORD)


def test_accepts_and_requires() -> None:
    assert REQUEST_017.accepts("arrival_time") and not REQUEST_017.accepts("eos_token_id")
    assert REQUEST_017.requires("pooling_params") and not REQUEST_017.requires("arrival_time")
    assert not REQUEST_017.requires("eos_token_id")
    assert KWARGS.accepts("eos_token_id") and not KWARGS.requires("eos_token_id")
    assert not POSONLY.accepts("x") and POSONLY.requires("x") and POSONLY.accepts("z")


def test_sources_share_the_interface() -> None:
    def kind_of(source: SignatureSource) -> str:
        return source.kind

    assert kind_of(StaticSignatures(TREE)) == "static"
    assert kind_of(LiveSignatures(sys.executable)) == "live"


def test_ignores_names_keywords_pydantic_drops() -> None:
    loose = StaticSignatures(TREE).get("vllm.pyd.Loose")  # pydantic dataclass, extra="ignore"
    assert loose.accepts("zzz") and loose.ignores("zzz")
    assert loose.accepts("a") and not loose.ignores("a")
    allows = StaticSignatures(TREE).get("vllm.pyd.AllowsExtra")  # extra="allow": kept
    assert allows.accepts("zzz") and not allows.ignores("zzz")
    assert not REQUEST_017.ignores("zzz") and not REQUEST_017.ignores("request_id")

"""speculators' Requires-Dist against vLLM's: only what cannot meet is relaxed, clause by clause."""

from __future__ import annotations

import pytest
from packaging.specifiers import SpecifierSet

from vllm_shim_patch.fleet import requirements as req


@pytest.mark.parametrize(("ours", "theirs", "meet"), [
    (">=4.56.1,<=4.57.6", "<5.21.0,>=5.16.1", False),
    (">=4.56.1,<=4.57.6", "<5,>=4.56.0", True),
    ("<=2.10.0,>=2.9.0", "==2.9.1", True),
    ("<=2.10.0,>=2.9.0", "==2.14.0", False),
    ("<=2.10.0", "==2.10.0", True),
    ("<2.10.0", "==2.10.0", False),
    ("==0.16.*", ">=0.16.1", True),
    ("==0.16.*", ">=0.17", False),
    ("~=2.1.3", "==2.1.9", True),
    ("~=2.1.3", "==2.2.0", False),
    ("!=5.0", "==5.0", True),  # an exclusion never makes them disjoint (bounds only)
    ("", "==1", True),
], ids=lambda v: v if isinstance(v, str) else str(v))
def test_meets(ours: str, theirs: str, meet: bool) -> None:
    assert req.meets(SpecifierSet(ours), SpecifierSet(theirs)) is meet


def test_relax_drops_only_the_clauses_that_cannot_meet() -> None:
    done = req.relax("transformers<=4.57.6,>=4.56.1", SpecifierSet("<5.21.0,>=5.16.1"))
    assert done is not None
    assert (done.after, done.dropped, done.vllm_requires) == ("transformers>=4.56.1", ("<=4.57.6",), "<5.21.0,>=5.16.1")
    assert req.relax("torch<=2.10.0,>=2.9.0", SpecifierSet("==2.9.1")) is None
    assert req.relax("foo==1.0", SpecifierSet(">=2")).after == "foo"  # type: ignore[union-attr]
    # A marker and extras stay as they were.
    kept = req.relax('httpx[http2]<0.20; python_version >= "3.10"', SpecifierSet(">=0.27"))
    assert kept is not None and kept.after == 'httpx[http2]; python_version >= "3.10"'


def test_rewrite_keeps_the_order_replaces_vllm_and_adds_the_series() -> None:
    ours = ["click", "torch<=2.10.0,>=2.9.0", "transformers<=4.57.6,>=4.56.1", 'pytest~=8.2.2; extra == "dev"',
            'vllm<=0.16.0,>=0.12.0; extra == "datagen"']
    vllm = ["torch==2.14.0", "transformers<5.21.0,>=5.16.1", 'datasets; extra == "bench"',
            'setuptools<81; python_version > "3.11"']
    out, changed = req.rewrite(ours, vllm, "vllm==0.33.*")
    assert out == [["click"], ["torch>=2.9.0"], ["transformers>=4.56.1", "vllm==0.33.*"], ['pytest~=8.2.2; extra == "dev"'],
                   ['vllm==0.33.*; extra == "datagen"']]
    assert [(c.name, c.before, c.after) for c in changed] == [
        ("torch", "torch<=2.10.0,>=2.9.0", "torch>=2.9.0"),
        ("transformers", "transformers<=4.57.6,>=4.56.1", "transformers>=4.56.1"),
        ("vllm", 'vllm<=0.16.0,>=0.12.0; extra == "datagen"', 'vllm==0.33.*; extra == "datagen"'),
    ]


def test_unknown_vllm_requirements_relax_nothing() -> None:
    out, changed = req.rewrite(["transformers<=4.57.6"], None, "vllm==0.33.*")
    assert out == [["transformers<=4.57.6", "vllm==0.33.*"]]
    assert changed == []


def test_an_unconditional_vllm_requirement_is_replaced() -> None:
    out, changed = req.rewrite(["vllm==0.11.0", "click"], [], "vllm==0.16.*")
    assert out == [[], ["click", "vllm==0.16.*"]]
    assert [(c.before, c.after) for c in changed] == [("vllm==0.11.0", "vllm==0.16.*")]
    assert req.rewrite([], [], "vllm==0.16.*")[0] == [["vllm==0.16.*"]]

"""The libcst engine: what a before/after case cannot say (sites, messages, bytes, guards, real files).

The plain before/after cases (matching, operations, layout) are rule files in cases/, run by
test_cases.py with the runner of `rules test`.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import libcst as cst
import pytest
from packaging.version import Version

from vllm_shim_patch.rewrite.engine import Engine
from vllm_shim_patch.rewrite.results import FileResult
from vllm_shim_patch.signatures.model import Param, Signature
from vllm_shim_patch.report.diff import file_diff
from vllm_shim_patch.rules import Rule
from vllm_shim_patch.rules.loader import load_pack, parse_rules


CASES = Path(__file__).parent / "cases"


def _rules(body: str, path: str | Path = "rules.yaml") -> list[Rule]:
    """Rules from the YAML of a `rules:` list (written at column 0)."""
    return parse_rules("schema: 1\nrules:\n" + textwrap.indent(textwrap.dedent(body), "  "), path)


def _run(body: str, src: str, **engine: object) -> FileResult:
    return Engine(_rules(body), **engine).transform(src.encode(), "pkg/mod.py")  # type: ignore[arg-type]


def _sites(result: FileResult) -> list[tuple[str, int, str, str]]:
    return [(s.rule_id, s.line, s.action, s.message) for s in result.sites]


# -- rules used by the tables ------------------------------------------------------------------

DROP = """\
- id: drop-eos
  call: [m.sub.X, m.X]  # the second name: m re-exports X
  since: "0.17"
  drop: [eos]
  why: gone
"""

DROP_SIG = """\
- id: drop-eos
  call: m.X
  since: "0.17"
  signature: (a, b, eos, c, d=None)
  drop: [eos]
  why: gone
"""

ADD = """\
- id: add-bs
  call: m.X
  since: "0.12"
  signature: (cfg, kv, som=None)
  add: {bs: "{cfg}.cache.bs"}
  why: now required
"""

ADD_CONST = """\
- id: add-bs
  call: m.X
  since: "0.12"
  add: {bs: "16"}
  why: now required
"""

RENAME = """\
- id: rename-old
  call: m.X
  since: "0.12"
  rename: {old: new}
  why: renamed
"""

MOVE = """\
- id: move-x
  call: m.sub.X
  since: "0.12"
  move: n.other.Y
  why: moved
"""

NOTICE = """\
- id: notice-x
  call: m.X
  since: "0.12"
  notice: check the units of timeout
  why: semantics changed
"""


# -- matching (before/after cases: cases/matching.yaml) ----------------------------------------


@pytest.mark.parametrize(
    ("src", "message"),
    [
        pytest.param(
            "from m.sub import X\nX = make()\nX(a, eos=1)\n",
            "X may be m.sub.X or a local X here: cannot tell which one is called",
            id="module-level-rebinding",
        ),
        pytest.param(
            "try:\n    from m.sub import X\nexcept ImportError:\n    from old import X\nX(a, eos=1)\n",
            "X may be m.sub.X or old.X here: cannot tell which one is called",
            id="import-fallback",
        ),
    ],
)
def test_ambiguous_name_is_left_for_a_human(src: str, message: str) -> None:
    result = _run(DROP, src)
    assert (result.status, result.after.decode()) == ("unchanged", src)
    assert [(s.action, s.message) for s in result.sites] == [("needs-human", message)]


def test_ambiguous_name_not_reported_for_a_rule_the_target_does_not_need() -> None:
    src = "from m.sub import X\nX = make()\nX(a, eos=1)\n"
    result = _run(DROP, src, version=Version("0.16"))
    assert (result.status, result.sites) == ("unchanged", ())


# -- operations (before/after cases: cases/operations.yaml) ------------------------------------


@pytest.mark.parametrize(
    ("rule", "src", "message"),
    [
        pytest.param(
            DROP,
            "from m import X\nX(1, 2, 3)\n",
            "cannot tell whether eos is passed: positional arguments at the call and no old"
            " 'signature' in the rule to name them",
            id="drop-positional-without-signature",
        ),
        pytest.param(
            DROP_SIG,
            "from m import X\nX(1, 2, 3, 4, 5, 6)\n",
            "dropping positional eos shifts an argument: more positional arguments than the old"
            " signature (a, b, eos, c, d=None) names",
            id="drop-more-positionals-than-signature",
        ),
        pytest.param(
            DROP,
            "from m import X\nX(*args, eos=1)\n",
            "*args/**kwargs at the call: cannot tell which arguments it passes",
            id="drop-star-args",
        ),
        pytest.param(
            DROP,
            "from m import X\nX(eos=1, **kwargs)\n",
            "*args/**kwargs at the call: cannot tell which arguments it passes",
            id="drop-star-kwargs",
        ),
        pytest.param(
            ADD,
            "from m import X\nX(cfg=make(), kv=k)\n",
            "{cfg} is bound to an expression that may have side effects",
            id="add-placeholder-bound-to-call",
        ),
        pytest.param(
            ADD,
            "from m import X\nX(cfg=a.b().c, kv=k)\n",
            "{cfg} is bound to an expression that may have side effects",
            id="add-placeholder-bound-to-attribute-of-call",
        ),
        pytest.param(
            ADD,
            "from m import X\nX(kv=k)\n",
            "argument cfg is not passed at this call, so {cfg} has no value",
            id="add-placeholder-argument-missing",
        ),
        pytest.param(
            ADD_CONST,
            "from m import X\nX(c)\n",
            "cannot tell whether bs is passed already: positional arguments at the call and no old"
            " 'signature' in the rule to name them",
            id="add-positional-without-signature",
        ),
        pytest.param(
            ADD,
            "from m import X\nX(**kw)\n",
            "*args/**kwargs at the call: cannot tell which arguments it passes",
            id="add-star-kwargs",
        ),
        pytest.param(
            RENAME,
            "from m import X\nX(*a, old=1)\n",
            "*args/**kwargs at the call: cannot tell which arguments it passes",
            id="rename-star-args",
        ),
    ],
)
def test_needs_human(rule: str, src: str, message: str) -> None:
    result = _run(rule, src)
    assert (result.status, result.after.decode()) == ("unchanged", src)
    assert [(s.line, s.action, s.message) for s in result.sites] == [(2, "needs-human", message)]


def test_notice_reports_and_changes_nothing() -> None:
    src = "from m import X\nX(1, timeout=5)\n"
    result = _run(NOTICE, src)
    assert (result.status, result.after.decode()) == ("unchanged", src)
    assert _sites(result) == [("notice-x", 2, "notice", "check the units of timeout")]


def test_edit_sites_name_rule_line_and_edit() -> None:
    result = _run(DROP, "from m import X\n\nX(\n    a,\n    eos=1,\n)\n")
    assert [
        (s.rule_id, s.line, s.end_line, s.callee, s.action, s.message, s.guarded)
        for s in result.sites
    ] == [("drop-eos", 3, 6, "m.X", "edited", "drop eos", False)]


# -- codemods (the rule and its before/after cases: cases/codemod.yaml) ----------------------------


@pytest.fixture
def codemod_rules() -> list[Rule]:
    return list(load_pack([CASES / "codemod.yaml"], bundled=False).rules)


@pytest.mark.parametrize(
    ("before", "after", "sites"),
    [
        pytest.param(
            "from m import X\nX(a)\n",
            "from m import X\nX.create(a)\n",
            [("use-create", 2, "edited", "call X.create")],
            id="rewrites",
        ),
        pytest.param(
            "from m import X\nX.create(a)\n",
            "from m import X\nX.create(a)\n",
            [],
            id="already",
        ),
        pytest.param(
            "from m import X\nX(ask=1)\n",
            "from m import X\nX(ask=1)\n",
            [("use-create", 2, "needs-human", "ask a human")],
            id="needs-human",
        ),
    ],
)
def test_codemod(
    codemod_rules: list[Rule], before: str, after: str, sites: list[tuple[str, int, str, str]]
) -> None:
    result = Engine(codemod_rules).transform(before.encode(), "mod.py")
    assert result.after.decode() == after
    assert _sites(result) == sites


def test_codemod_that_raises_fails_that_file_only(
    codemod_rules: list[Rule], tmp_path: Path
) -> None:
    (tmp_path / "a.py").write_text("from m import X\nX(boom=1)\n")
    (tmp_path / "b.py").write_text("from m import X\nX(a)\n")
    a, b = Engine(codemod_rules).run(tmp_path, ["a.py", "b.py"])
    assert (a.status, a.reason, a.after) == ("failed", "ValueError: cannot handle boom", a.before)
    assert (b.status, b.after) == ("changed", b"from m import X\nX.create(a)\n")


# -- layout (before/after cases: cases/layout.yaml) --------------------------------------------


def test_crlf_line_endings_preserved() -> None:
    src = b"from m import X\r\nX(\r\n    a,\r\n    eos=1,\r\n)\r\nY = 1\r\n"
    result = Engine(_rules(DROP)).transform(src, "mod.py")
    assert result.after == b"from m import X\r\nX(\r\n    a,\r\n)\r\nY = 1\r\n"


def test_crlf_add_uses_crlf() -> None:
    src = b"from m import X\r\nX(\r\n    cfg=c,\r\n    kv=k,\r\n)\r\n"
    result = Engine(_rules(ADD)).transform(src, "mod.py")
    assert (
        result.after
        == b"from m import X\r\nX(\r\n    cfg=c,\r\n    kv=k,\r\n    bs=c.cache.bs,\r\n)\r\n"
    )


def test_latin1_file_with_cookie_preserved_outside_the_edit() -> None:
    src = "# -*- coding: latin-1 -*-\nfrom m import X\ns = 'café'\nX(s, eos='é')  # naïve\n".encode(
        "latin-1"
    )
    result = Engine(_rules(DROP)).transform(src, "mod.py")
    assert (
        result.after
        == "# -*- coding: latin-1 -*-\nfrom m import X\ns = 'café'\nX(s)  # naïve\n".encode(
            "latin-1"
        )
    )


# -- several rules, one pass, idempotency ------------------------------------------------------

THREE_ON_ONE_CALL = """\
- id: drop-eos
  call: m.X
  since: "0.12"
  drop: [eos]
  why: gone
- id: add-bs
  call: m.X
  since: "0.12"
  add: {bs: "{cfg}.cache.bs"}
  why: now required
- id: rename-old
  call: m.X
  since: "0.12"
  rename: {old: new}
  why: renamed
"""

PACK = (
    DROP_SIG.replace("m.X", "m.A") + ADD.replace("m.X", "m.B") + RENAME.replace("m.X", "m.C") + MOVE
)


def test_several_rules_on_one_call() -> None:
    result = _run(THREE_ON_ONE_CALL, "from m import X\nX(\n    cfg=c,\n    eos=1,\n    old=2,\n)\n")
    assert (
        result.after.decode()
        == "from m import X\nX(\n    cfg=c,\n    new=2,\n    bs=c.cache.bs,\n)\n"
    )
    assert _sites(result) == [
        ("drop-eos", 2, "edited", "drop eos"),
        ("add-bs", 2, "edited", "add bs"),
        ("rename-old", 2, "edited", "rename old to new"),
    ]


def test_several_rules_on_one_file() -> None:
    before = textwrap.dedent(
        """\
        from m import A, B, C
        from m.sub import X


        def build(cfg):
            a = A(1, 2, 3, 4)
            b = B(cfg, kv)
            return C(a, b, old=X(a))
        """
    )
    after = textwrap.dedent(
        """\
        from m import A, B, C
        from n.other import Y


        def build(cfg):
            a = A(1, 2, c=4)
            b = B(cfg, kv, bs=cfg.cache.bs)
            return C(a, b, new=Y(a))
        """
    )
    result = _run(PACK, before)
    assert result.after.decode() == after
    assert _sites(result) == [
        ("drop-eos", 6, "edited", "drop eos"),
        ("add-bs", 7, "edited", "add bs"),
        ("move-x", 8, "edited", "move to n.other.Y"),
        ("rename-old", 8, "edited", "rename old to new"),
    ]


@pytest.mark.parametrize(
    ("rule", "src"),
    [
        pytest.param(DROP, "from m import X\nX(\n    a,  # a\n    eos=1,  # e\n)\n", id="drop"),
        pytest.param(DROP_SIG, "from m import X\nX(1, 2, 3, 4, 5)\n", id="drop-positional"),
        pytest.param(ADD, "from m import X\nX(c, k)\n", id="add"),
        pytest.param(RENAME, "from m import X\nX(old=1)\n", id="rename"),
        pytest.param(MOVE, "from m.sub import X\nX(1)\n", id="move"),
        pytest.param(
            THREE_ON_ONE_CALL, "from m import X\nX(cfg=c, eos=1, old=2)\n", id="three-rules"
        ),
    ],
)
def test_second_run_is_a_no_op(rule: str, src: str) -> None:
    first = _run(rule, src)
    assert first.status == "changed"
    second = _run(rule, first.after.decode())
    assert (second.status, second.after) == ("unchanged", first.after)


# -- prefilter and per-file results ------------------------------------------------------------


def test_prefilter_skips_parsing(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*args: object, **kwargs: object) -> None:
        raise AssertionError("parsed")

    monkeypatch.setattr(cst, "parse_module", boom)
    result = Engine(_rules(DROP)).transform(b"def (:\n  nothing to see\n", "mod.py")
    assert (result.status, result.after, result.reason) == (
        "unchanged",
        b"def (:\n  nothing to see\n",
        "",
    )


def test_syntax_error_in_a_file_that_names_the_callable_is_skipped() -> None:
    src = b"from m import X\ndef (:\n    X(eos=1)\n"
    result = Engine(_rules(DROP)).transform(src, "mod.py")
    assert (result.status, result.reason, result.after) == (
        "skipped",
        "syntax error at line 2: invalid syntax",
        src,
    )


def test_unreadable_file_is_skipped(tmp_path: Path) -> None:
    (result,) = Engine(_rules(DROP)).run(tmp_path, ["missing.py"])
    assert (result.status, result.reason) == ("skipped", "cannot read: No such file or directory")


# -- version selection and signature guards ----------------------------------------------------


@pytest.mark.parametrize(
    ("version", "after"),
    [
        pytest.param(None, "from m import X\nX(a)\n", id="no-version-every-rule"),
        pytest.param(Version("0.16"), "from m import X\nX(a, eos=1)\n", id="0.16-before-since"),
        pytest.param(
            Version("0.16.1.dev45+g1a2b3c4.cu129"),
            "from m import X\nX(a, eos=1)\n",
            id="0.16-nightly",
        ),
        pytest.param(Version("0.17"), "from m import X\nX(a)\n", id="0.17-at-since"),
        pytest.param(Version("0.18.1"), "from m import X\nX(a)\n", id="0.18-after-since"),
    ],
)
def test_since_selects_rules_when_unguarded(version: Version | None, after: str) -> None:
    result = _run(DROP, "from m import X\nX(a, eos=1)\n", version=version)
    assert result.after.decode() == after
    assert all(not s.guarded for s in result.sites)


def FakeSignature(*names: str) -> Signature:  # noqa: N802  (reads like the class it builds)
    """A signature taking exactly these keywords (optional), as a vLLM callable would."""
    return Signature("m.X", tuple(Param(n, "positional_or_keyword", False) for n in names), "m.py:1")


@pytest.mark.parametrize(
    ("rule", "version", "takes", "src", "after", "site"),
    [
        pytest.param(
            DROP,
            "0.17",
            ("a", "eos"),
            "from m import X\nX(a, eos=1)\n",
            "from m import X\nX(a, eos=1)\n",
            ("not-needed", "not needed for this vLLM: X still takes eos"),
            id="drop-skipped-while-accepted",
        ),
        pytest.param(
            DROP,
            "0.16",
            ("a",),
            "from m import X\nX(a, eos=1)\n",
            "from m import X\nX(a)\n",
            ("edited", "drop eos"),
            id="drop-applied-when-gone-before-since",
        ),
        pytest.param(
            ADD,
            "0.11",
            ("cfg", "kv", "bs"),
            "from m import X\nX(c, k)\n",
            "from m import X\nX(c, k, bs=c.cache.bs)\n",
            ("edited", "add bs"),
            id="add-applied-when-accepted-before-since",
        ),
        pytest.param(
            ADD,
            "0.17",
            ("cfg", "kv"),
            "from m import X\nX(c, k)\n",
            "from m import X\nX(c, k)\n",
            ("not-needed", "not needed for this vLLM: X does not take bs"),
            id="add-skipped-when-not-accepted",
        ),
        pytest.param(
            RENAME,
            "0.17",
            ("old", "new"),
            "from m import X\nX(old=1)\n",
            "from m import X\nX(old=1)\n",
            ("not-needed", "not needed for this vLLM: X still takes old"),
            id="rename-skipped-while-old-accepted",
        ),
        pytest.param(
            RENAME,
            "0.17",
            ("other",),
            "from m import X\nX(old=1)\n",
            "from m import X\nX(old=1)\n",
            ("not-needed", "not needed for this vLLM: X does not take new"),
            id="rename-skipped-when-new-not-accepted",
        ),
    ],
)
def test_signature_guard_decides(
    rule: str, version: str, takes: tuple[str, ...], src: str, after: str, site: tuple[str, str]
) -> None:
    result = _run(rule, src, version=Version(version), signatures={"m.X": FakeSignature(*takes)})
    assert result.after.decode() == after
    assert [(s.action, s.message, s.guarded) for s in result.sites] == [(*site, True)]


PYDANTIC_IGNORE = Signature("m.X", (Param("a", "positional_or_keyword", True),
                                    Param("ignored_extra", "var_keyword", False)), "m.py:1")


@pytest.mark.parametrize(("rule", "src", "after", "site"), [
    pytest.param(ADD, "from m import X\nX(c, k)\n", "from m import X\nX(c, k)\n",
                 ("not-needed", "not needed for this vLLM: X does not take bs"), id="add-what-it-would-drop"),
    pytest.param(RENAME, "from m import X\nX(old=1)\n", "from m import X\nX(old=1)\n",
                 ("not-needed", "not needed for this vLLM: X does not take new"), id="rename-to-what-it-would-drop"),
    pytest.param(DROP, "from m import X\nX(a, eos=1)\n", "from m import X\nX(a)\n",
                 ("edited", "drop eos"), id="drop-what-it-drops-anyway"),
])
def test_a_keyword_pydantic_would_drop_is_not_taken(rule: str, src: str, after: str, site: tuple[str, str]) -> None:
    """A pydantic dataclass with extra="ignore" (vLLM's configs before 0.16) binds any keyword and
    drops it: adding or renaming into such a keyword would fix nothing (the value would be lost)."""
    result = _run(rule, src, version=Version("0.12"), signatures={"m.X": PYDANTIC_IGNORE})
    assert result.after.decode() == after
    assert [(s.action, s.message, s.guarded) for s in result.sites] == [(*site, True)]


def test_guard_only_for_the_callee_it_names() -> None:
    # A signature for another callable does not guard this one: `since` decides, unguarded.
    result = _run(
        DROP,
        "from m import X\nX(a, eos=1)\n",
        version=Version("0.16"),
        signatures={"m.Z": FakeSignature()},
    )
    assert (result.status, result.sites) == ("unchanged", ())


# -- the real speculators 0.3.0 ----------------------------------------------------------------

GENERATOR = "speculators/data_generation/vllm_hidden_states_generator.py"

DIFF_016 = """\
--- a/speculators/data_generation/vllm_hidden_states_generator.py
+++ b/speculators/data_generation/vllm_hidden_states_generator.py
@@ -136,7 +136,6 @@ kv-cache-config-drop-specs
         kv_cache_config = get_kv_cache_config_from_groups(
             vllm_config=self.vllm_config,
             kv_cache_groups=kv_cache_groups,
-            kv_cache_specs=kv_cache_spec,
             available_memory=cache_memory,
         )
 
@@ -149,6 +148,7 @@ scheduler-add-block-size
             vllm_config=self.vllm_config,
             kv_cache_config=kv_cache_config,
             structured_output_manager=structured_output_manager,
+            block_size=self.vllm_config.cache_config.block_size,
         )
 
         log.info("Initializing KV cache on all workers...")
@@ -166,6 +166,7 @@ cache-config-no-prefix-caching
         cache_config = CacheConfig(
             block_size=VLLM_BLOCK_SIZE,
             gpu_memory_utilization=gpu_memory_utilization,
+            enable_prefix_caching=False,
         )
 
         # For prefill-only workloads, use conservative scheduler limits
@@ -195,6 +196,7 @@ scheduler-config-add-is-encoder-decoder
                 max_num_seqs=max_num_seqs,
                 max_model_len=max_model_len,
                 max_num_batched_tokens=max_num_batched_tokens,
+                is_encoder_decoder=False,
             ),
             device_config=DeviceConfig(),
             load_config=LoadConfig(),
@@ -242,6 +244,11 @@ generator-abort-completed, generator-results-by-request
                 arrival_time=INITIAL_ARRIVAL_TIME,
             )
             self.scheduler.add_request(req)
+        request_ids = [f"req_{self._request_counter}_{i}" for i, ids in enumerate(input_ids_list)]
+
+        # A chunked prompt goes on in the next step: abort a request only once its prefill is complete.
+        prompt_lens = {f"req_{self._request_counter}_{i}": len(ids) for i, ids in enumerate(input_ids_list)}
+        prefilled = dict.fromkeys(prompt_lens, 0)
 
         # Increment to ensure unique request IDs across calls
         # (prevents KV cache corruption with delayed block freeing)
@@ -258,17 +265,31 @@ generator-abort-completed, generator-results-by-request, generator-flush-finished, executor-sample-tokens, collective-rpc-single-reply
                 f"{scheduler_output.total_num_scheduled_tokens}"
             )
 
-            self.executor.execute_model(scheduler_output)
-
-            for req_id in scheduler_output.num_scheduled_tokens:
-                self.scheduler.finish_requests([req_id], RequestStatus.FINISHED_ABORTED)
+            # The worker attributes this step's rows to request ids in the model runner's batch order.
+            self.executor.collective_rpc("_set_request_metadata", args=(dict(scheduler_output.num_scheduled_tokens),))
+            model_output = self.executor.execute_model(scheduler_output)
+            if model_output is None:
+                model_output = self.executor.sample_tokens(None)
+
+            for req_id, num_tokens in scheduler_output.num_scheduled_tokens.items():
+                if getattr(scheduler_output, "preempted_req_ids", None):
+                    raise RuntimeError("vLLM preempted requests (too little KV cache): their prompts would be computed twice and their hidden states misattributed; raise gpu_memory_utilization or pass fewer prompts per call")
+                prefilled[req_id] = prefilled.get(req_id, 0) + num_tokens
+                if prefilled[req_id] >= prompt_lens.get(req_id, 0):
+                    self.scheduler.finish_requests([req_id], RequestStatus.FINISHED_ABORTED)
+
+        # The requests aborted in the last step reach the model runner only with a step: run the empty one.
+        if scheduler_output.finished_req_ids:
+            model_output = self.executor.execute_model(scheduler_output)
+            if model_output is None:
+                model_output = self.executor.sample_tokens(None)
 
         # Get captured states from driver worker
         captured_states_list = self.executor.collective_rpc(
             "_get_captured_states",
             unique_reply_rank=0,
         )
-        aux_hidden_states = captured_states_list[0]
+        aux_hidden_states = captured_states_list
 
         if not aux_hidden_states:
             raise RuntimeError("Failed to capture hidden states from worker")
@@ -280,7 +301,7 @@ generator-results-by-request
         offset = 0
         for i, seq_len in enumerate(seq_lens):
             layer_states = [
-                h[offset : offset + seq_len].clone().cpu() for h in aux_hidden_states
+                h.clone().cpu() for h in aux_hidden_states[request_ids[i]]
             ]
 
             input_ids_tensor = torch.as_tensor(input_ids_list[i], dtype=torch.long)
"""

# 0.17 adds the eos_token_id drop; the hunks after it start one line earlier.
DIFF_017 = """\
--- a/speculators/data_generation/vllm_hidden_states_generator.py
+++ b/speculators/data_generation/vllm_hidden_states_generator.py
@@ -136,7 +136,6 @@ kv-cache-config-drop-specs
         kv_cache_config = get_kv_cache_config_from_groups(
             vllm_config=self.vllm_config,
             kv_cache_groups=kv_cache_groups,
-            kv_cache_specs=kv_cache_spec,
             available_memory=cache_memory,
         )
 
@@ -149,6 +148,7 @@ scheduler-add-block-size
             vllm_config=self.vllm_config,
             kv_cache_config=kv_cache_config,
             structured_output_manager=structured_output_manager,
+            block_size=self.vllm_config.cache_config.block_size,
         )
 
         log.info("Initializing KV cache on all workers...")
@@ -166,6 +166,7 @@ cache-config-no-prefix-caching
         cache_config = CacheConfig(
             block_size=VLLM_BLOCK_SIZE,
             gpu_memory_utilization=gpu_memory_utilization,
+            enable_prefix_caching=False,
         )
 
         # For prefill-only workloads, use conservative scheduler limits
@@ -195,6 +196,7 @@ scheduler-config-add-is-encoder-decoder
                 max_num_seqs=max_num_seqs,
                 max_model_len=max_model_len,
                 max_num_batched_tokens=max_num_batched_tokens,
+                is_encoder_decoder=False,
             ),
             device_config=DeviceConfig(),
             load_config=LoadConfig(),
@@ -238,10 +240,14 @@ request-drop-eos-token-id, generator-abort-completed, generator-results-by-request
                     max_tokens=MAX_DECODE_TOKENS, temperature=SAMPLING_TEMPERATURE
                 ),
                 pooling_params=None,
-                eos_token_id=self.tokenizer.eos_token_id,
                 arrival_time=INITIAL_ARRIVAL_TIME,
             )
             self.scheduler.add_request(req)
+        request_ids = [f"req_{self._request_counter}_{i}" for i, ids in enumerate(input_ids_list)]
+
+        # A chunked prompt goes on in the next step: abort a request only once its prefill is complete.
+        prompt_lens = {f"req_{self._request_counter}_{i}": len(ids) for i, ids in enumerate(input_ids_list)}
+        prefilled = dict.fromkeys(prompt_lens, 0)
 
         # Increment to ensure unique request IDs across calls
         # (prevents KV cache corruption with delayed block freeing)
@@ -258,17 +264,31 @@ generator-abort-completed, generator-results-by-request, generator-flush-finished, executor-sample-tokens, collective-rpc-single-reply
                 f"{scheduler_output.total_num_scheduled_tokens}"
             )
 
-            self.executor.execute_model(scheduler_output)
-
-            for req_id in scheduler_output.num_scheduled_tokens:
-                self.scheduler.finish_requests([req_id], RequestStatus.FINISHED_ABORTED)
+            # The worker attributes this step's rows to request ids in the model runner's batch order.
+            self.executor.collective_rpc("_set_request_metadata", args=(dict(scheduler_output.num_scheduled_tokens),))
+            model_output = self.executor.execute_model(scheduler_output)
+            if model_output is None:
+                model_output = self.executor.sample_tokens(None)
+
+            for req_id, num_tokens in scheduler_output.num_scheduled_tokens.items():
+                if getattr(scheduler_output, "preempted_req_ids", None):
+                    raise RuntimeError("vLLM preempted requests (too little KV cache): their prompts would be computed twice and their hidden states misattributed; raise gpu_memory_utilization or pass fewer prompts per call")
+                prefilled[req_id] = prefilled.get(req_id, 0) + num_tokens
+                if prefilled[req_id] >= prompt_lens.get(req_id, 0):
+                    self.scheduler.finish_requests([req_id], RequestStatus.FINISHED_ABORTED)
+
+        # The requests aborted in the last step reach the model runner only with a step: run the empty one.
+        if scheduler_output.finished_req_ids:
+            model_output = self.executor.execute_model(scheduler_output)
+            if model_output is None:
+                model_output = self.executor.sample_tokens(None)
 
         # Get captured states from driver worker
         captured_states_list = self.executor.collective_rpc(
             "_get_captured_states",
             unique_reply_rank=0,
         )
-        aux_hidden_states = captured_states_list[0]
+        aux_hidden_states = captured_states_list
 
         if not aux_hidden_states:
             raise RuntimeError("Failed to capture hidden states from worker")
@@ -280,7 +300,7 @@ generator-results-by-request
         offset = 0
         for i, seq_len in enumerate(seq_lens):
             layer_states = [
-                h[offset : offset + seq_len].clone().cpu() for h in aux_hidden_states
+                h.clone().cpu() for h in aux_hidden_states[request_ids[i]]
             ]
 
             input_ids_tensor = torch.as_tensor(input_ids_list[i], dtype=torch.long)
"""


# speculators-data.yaml's edits of the generator (they run before the vLLM rules): each prompt's
# length and request id beside the Request loop, the abort, the step's tokens per request, the
# flush after the loop, the rows by request id. The second sample_tokens pairs the flush's step.
DATA_EDITS = ["generator-abort-completed", "generator-abort-completed", "generator-results-by-request",
              "generator-results-by-request", "generator-results-by-request", "generator-flush-finished"]


@pytest.fixture(scope="module")
def generator_source() -> bytes:
    sys.path.insert(0, str(Path(__file__).parents[1]))
    try:
        import realdata
    finally:
        sys.path.pop(0)
    with zipfile.ZipFile(realdata.speculators_wheel()) as zf:
        return zf.read(GENERATOR)


@pytest.mark.parametrize(
    ("version", "diff", "rule_ids"),
    [
        pytest.param(
            "0.17",
            DIFF_017,
            ["kv-cache-config-drop-specs", "scheduler-add-block-size", "cache-config-no-prefix-caching",
             "scheduler-config-add-is-encoder-decoder", "request-drop-eos-token-id", *DATA_EDITS,
             "executor-sample-tokens", "executor-sample-tokens", "collective-rpc-single-reply"],
            id="0.17",
        ),
        pytest.param(
            "0.16",
            DIFF_016,
            ["kv-cache-config-drop-specs", "scheduler-add-block-size", "cache-config-no-prefix-caching",
             "scheduler-config-add-is-encoder-decoder", *DATA_EDITS, "executor-sample-tokens",
             "executor-sample-tokens", "collective-rpc-single-reply"],
            id="0.16",
        ),
    ],
)
@pytest.mark.slow  # the real wheel
def test_real_speculators_generator(
    generator_source: bytes, tmp_path: Path, version: str, diff: str, rule_ids: list[str]
) -> None:
    # The default selection: tokenizer-trust-remote-code runs only with --trust-remote-code.
    result = Engine(load_pack().selected().rules, version=Version(version)).transform(
        generator_source, GENERATOR
    )
    assert result.status == "changed"
    assert [(s.rule_id, s.action) for s in result.sites if s.action == "edited"] == [
        (r, "edited") for r in rule_ids
    ]
    # speculators 0.4.0's result order is not 0.3.0's bug; the KV cache layout needs resolving from
    # vLLM 0.29.0 only, the backends' block sizes from 0.18.0 and the V1 runner pin from 0.25.1 (the
    # moves of 0.33.0, call rules, record no site where `since` rules them out).
    assert [(s.rule_id, s.action, s.message) for s in result.sites if s.action != "edited"] == [
        ("generator-results-in-input-order", "already", "nothing to change"),
        ("kv-cache-resolve-layout", "not-needed", "not needed before vLLM 0.29.0"),
        ("generator-kernel-block-size", "not-needed", "not needed before vLLM 0.18.0"),
        ("generator-v1-runner", "not-needed", "not needed before vLLM 0.25.1")]
    assert file_diff(result) == diff
    compile(result.after, GENERATOR, "exec", dont_inherit=True)

    if shutil.which("patch") is None:
        pytest.skip("the `patch` binary is missing (Debian package: patch)")
    target = tmp_path / GENERATOR
    target.parent.mkdir(parents=True)
    target.write_bytes(generator_source)
    subprocess.run(["patch", "-p1", "--quiet"], input=diff.encode(), cwd=tmp_path, check=True)
    assert target.read_bytes() == result.after


@pytest.mark.slow  # the real wheel
def test_real_speculators_generator_is_idempotent(generator_source: bytes) -> None:
    engine = Engine(load_pack().selected().rules, version=Version("0.17"))
    once = engine.transform(generator_source, GENERATOR)
    twice = engine.transform(once.after, GENERATOR)
    assert (twice.status, twice.after) == ("unchanged", once.after)


@pytest.mark.parametrize(
    ("source", "message"),
    [
        pytest.param(
            "from m.sub import X\nX(a, eos=compute())\n",
            "dropping eos would also drop the expression it passes, which may have side effects",
            id="drop-call-value",
        ),
        pytest.param(
            "from m.sub import X\nX(a, eos=items[0])\n",
            "dropping eos would also drop the expression it passes, which may have side effects",
            id="drop-subscript-value",
        ),
    ],
)
def test_drop_never_discards_code_that_runs(source: str, message: str) -> None:
    result = _run(DROP, source)
    assert result.after.decode() == source
    assert [(s.action, s.message) for s in result.sites] == [("needs-human", message)]


def test_drop_before_a_positional_only_parameter_is_left_for_a_human() -> None:
    rules = parse_rules(
        """\
schema: 1
rules:
  - id: drop-b
    call: m.g
    since: "0.1"
    signature: (a, b, c, /)
    drop: [b]
    why: test
""",
        "t.yaml",
    )
    source = b"from m import g\ng(1, 2, 3)\n"
    result = Engine(rules).transform(source, "x.py")
    assert result.after == source
    assert [(s.action, s.message) for s in result.sites] == [
        ("needs-human", "dropping positional b shifts c, which is positional-only")
    ]


# -- a move is guarded by the installed vLLM: the old module lacks the name, the new one has it --

MOVE_SRC = "from m.sub import X\nX(1)\n"


@pytest.mark.parametrize(("facts", "version", "changed", "sites"), [
    pytest.param({"m.sub.X": False, "n.other.Y": True}, None, True,
                 [("move-x", 2, "edited", "move to n.other.Y", True)], id="moved"),
    # The guard decides over `since`: a release before 0.12 that has the move is moved, ...
    pytest.param({"m.sub.X": False, "n.other.Y": True}, Version("0.11"), True,
                 [("move-x", 2, "edited", "move to n.other.Y", True)], id="moved-before-since"),
    # ... one after it that still has the old name is not.
    pytest.param({"m.sub.X": True, "n.other.Y": None}, Version("0.16"), False,
                 [("move-x", 2, "not-needed", "not needed for this vLLM: sub still defines X", True)],
                 id="old-module-still-has-it"),
    pytest.param({"m.sub.X": False, "n.other.Y": False}, Version("0.16"), False,
                 [("move-x", 2, "not-needed", "not needed for this vLLM: other does not define Y", True)],
                 id="new-module-lacks-it"),
    # Nothing known: `since` decides, and the site says unguarded.
    pytest.param({"m.sub.X": None, "n.other.Y": None}, Version("0.16"), True,
                 [("move-x", 2, "edited", "move to n.other.Y", False)], id="unknown-since-decides"),
    pytest.param(None, Version("0.11"), False, [], id="unknown-before-since"),
])
def test_a_move_is_guarded_by_where_the_name_is(facts: dict[str, bool | None] | None, version: Version | None,
                                                changed: bool, sites: list[tuple[str, int, str, str, bool]]) -> None:
    result = _run(MOVE, MOVE_SRC, version=version, facts=facts)
    assert result.changed is changed
    assert [(s.rule_id, s.line, s.action, s.message, s.guarded) for s in result.sites] == sites
    if changed:
        assert result.after == b"from n.other import Y\n\nY(1)\n"


def test_names_moved_together_out_of_a_parenthesised_import_keep_its_layout() -> None:
    rules = """\
- id: move-a
  call: m.old.A
  since: "0.12"
  move: m.new.A
  why: moved
- id: move-b
  call: m.old.B
  since: "0.12"
  move: m.new.B
  why: moved
"""
    src = "from m.old import (\n    A,\n    B,\n    C,\n)\nA(B(C()))\n"
    result = _run(rules, src)
    assert result.after == b"from m.old import (\n    C,\n)\nfrom m.new import (\n    A,\n    B,\n)\nA(B(C()))\n"

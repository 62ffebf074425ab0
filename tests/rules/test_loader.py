"""Rule loading and validation: one malformed file per mistake, each with its exact message."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from click.testing import CliRunner
from packaging.version import Version

import tree
from vllm_shim_patch.cli import main
from vllm_shim_patch.errors import RuleError
from vllm_shim_patch.rules import Example, OldSignature, Rule
from vllm_shim_patch.rules.loader import load_pack, parse_rules
from vllm_shim_patch.rewrite.rule import Guard

MALFORMED = Path(__file__).parent / "malformed"
_PAIR = MALFORMED / "duplicate-id-across-files"

# name in tests/malformed → (line, rule id, message); `{dir}` is tests/malformed as given.
CORPUS: dict[str, tuple[int | None, str | None, str]] = {
    "yaml-syntax-error.yaml": (
        5,
        None,
        "YAML syntax error: expected <block end>, but found '<block mapping start>'",
    ),
    "unknown-top-level-key.yaml": (
        3,
        None,
        "unknown key 'rulez' at top level (known: schema, package, rules)",
    ),
    "unknown-rule-key.yaml": (8, "typo-key", "unknown key 'sinse' in rule; did you mean 'since'?"),
    "unknown-operation.yaml": (
        7,
        "bad-op",
        "unknown operation 'delete' (operations: drop, add, rename, move, notice, codemod, pin, method); did you mean 'drop'?",
    ),
    "missing-id.yaml": (3, None, "rule has no 'id'"),
    "duplicate-id-in-file.yaml": (
        8,
        "twice",
        "duplicate id (first defined at {dir}/duplicate-id-in-file.yaml:3)",
    ),
    "duplicate-id-across-files": (
        8,
        "shared",
        "duplicate id (first defined at {dir}/duplicate-id-across-files/a.yaml:3)",
    ),
    "bad-id.yaml": (3, None, "id 'Drop_EOS' must be lowercase letters, digits and dashes"),
    "missing-call.yaml": (3, "no-call", "missing 'call'"),
    "missing-since.yaml": (3, "no-since", "missing 'since'"),
    "missing-why.yaml": (3, "no-why", "missing 'why'"),
    "bad-call-name.yaml": (
        4,
        "short-call",
        "'call' 'Request' is not a fully qualified name like vllm.module.Name",
    ),
    "call-listed-twice.yaml": (6, "twice-called", "'call' lists 'vllm.v1.request.Request' twice"),
    "bad-version.yaml": (5, "bad-since", "'since' '0.17-nightly' is not a PEP 440 version"),
    "guard-bad-requires.yaml": (8, "bad-requires", "'guard: requires' transformers: '5 or later' is not a "
                                                   "version specifier like '>=5'"),
    "guard-requires-not-a-distribution.yaml": (8, "bad-distribution", "'guard: requires' 'transformers>=5' is "
                                                                      "not a distribution name like transformers"),
    "guard-reason-bad-name.yaml": (8, "bad-reason-name", "'guard: lacks' 'gpu_model_runner' is not a fully "
                                                         "qualified name like vllm.module.Class.name"),
    "guard-reason-empty.yaml": (8, "empty-reason", "'guard: defines' reason for 'vllm.v1.worker.gpu_model_runner' "
                                                   "must be a non-empty value"),
    "bad-symptom.yaml": (7, "bad-symptom", "'symptoms' entry 'unexpected keyword (argument' is not a regular "
                                           "expression (missing ), unterminated subpattern at position 19)"),
    "add-not-an-expression.yaml": (
        8,
        "add-statement",
        "'add' 'block_size': 'x = 16' is not a single Python expression",
    ),
    "placeholder-not-in-signature.yaml": (
        9,
        "unknown-placeholder",
        (
            "'add' 'block_size': placeholder {config} is not a parameter of the old 'signature'"
            " (vllm_config, kv_cache_config)"
        ),
    ),
    "placeholder-names-added-argument.yaml": (
        9,
        "self-placeholder",
        "'add' 'page_size': placeholder {block_size} names an argument this rule adds",
    ),
    "placeholder-names-dropped-argument.yaml": (
        9,
        "add-from-dropped",
        "'add' 'kv_cache_groups': placeholder {kv_cache_specs} names an argument this rule drops",
    ),
    "drop-not-in-signature.yaml": (
        8,
        "drop-unknown",
        "'drop' names 'eos_token', which the old 'signature' does not have",
    ),
    "bad-signature.yaml": (
        7,
        "broken-signature",
        "'signature' 'request_id, eos_token_id' is not a parameter list like (a, b, c=None)",
    ),
    "example-missing-after.yaml": (9, "half-example", "an example needs both 'before' and 'after'"),
    "example-invalid-python.yaml": (
        9,
        "broken-example",
        "'before' is not valid Python: '(' was never closed (line 2 of the snippet)",
    ),
    "unknown-codemod.yaml": (
        7,
        "missing-codemod",
        (
            "codemod 'no_such_codemod' not found (looked in codemods/ beside the rule file and the"
            " bundled codemods)"
        ),
    ),
    "no-operation.yaml": (
        3,
        "does-nothing",
        "rule has no operation (one of: drop, add, rename, move, notice, codemod, pin, method)",
    ),
    "empty-file.yaml": (None, None, "file is empty: expected 'schema', 'rules'"),
    "not-utf8.yaml": (6, None, "not valid UTF-8"),
    "duplicate-mapping-key.yaml": (8, "two-drops", "a rule has key 'drop' twice"),
    "rename-to-itself.yaml": (8, "same-name", "'rename' 'eos_token_id' to itself"),
    "schema-2.yaml": (1, None, "unsupported schema '2' (this tool reads schema 1)"),
    "nul-byte.yaml": (6, None, ("control character U+0000 at column 12: rule files are plain text "
                               "(write escapes in quoted strings)")),
    "control-byte.yaml": (7, None, ("control character U+0007 at column 16: rule files are plain text "
                                   "(write escapes in quoted strings)")),
    "id-trailing-newline.yaml": (3, None, "id 'trailing-newline\\n' must be lowercase letters, digits and dashes"),
    "yaml-anchor-alias.yaml": (9, None, "YAML anchor &snippet is not allowed: rule files spell every value out"),
    "yaml-alias.yaml": (8, None, "YAML alias *elsewhere is not allowed: rule files spell every value out"),
    "unchanged-nul-escape.yaml": (
        8, "nul-escape", "each 'unchanged' entry is not valid Python: source code string cannot contain null bytes"
    ),
    "python-tag.yaml": (
        6,
        "unsafe",
        (
            "YAML tag '!!python/object/apply:os.system' is not allowed: rule files hold plain"
            " strings, lists and mappings"
        ),
    ),
}


def _offending_file(name: str) -> str:
    """The file the error is about: for the two-file case, the second one loaded."""
    return f"{MALFORMED}/{name}/b.yaml" if name == _PAIR.name else f"{MALFORMED}/{name}"


def _expected(name: str) -> str:
    line, rule_id, text = CORPUS[name]
    where = _offending_file(name) + ("" if line is None else f":{line}")
    rule = f" rule {rule_id!r}:" if rule_id else ""
    return f"{where}:{rule} " + text.replace("{dir}", str(MALFORMED))


def test_corpus_covers_every_file() -> None:
    assert sorted(CORPUS) == sorted(p.name for p in MALFORMED.iterdir())
    assert len(CORPUS) >= 15


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_malformed(name: str) -> None:
    with pytest.raises(RuleError) as info:
        load_pack([MALFORMED / name], bundled=False)
    assert str(info.value) == _expected(name)
    line, rule_id, _ = CORPUS[name]
    assert (info.value.path, info.value.line, info.value.rule_id) == (
        _offending_file(name),
        line,
        rule_id,
    )


def test_malformed_messages_are_pairwise_distinct() -> None:
    # The text alone, without the file name and line that already tell the files apart.
    texts = {name: CORPUS[name][2].replace("{dir}", str(MALFORMED)) for name in CORPUS}
    for (a, ta), (b, tb) in itertools.combinations(texts.items(), 2):
        assert ta != tb, (a, b)


def test_each_file_of_the_pair_loads_alone() -> None:
    for path in sorted(_PAIR.glob("*.yaml")):
        assert load_pack([path], bundled=False).rules


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_rules_check_cli(name: str) -> None:
    result = CliRunner().invoke(main, ["rules", "check", str(MALFORMED / name)])
    assert (result.exit_code, result.stdout, result.stderr) == (
        2,
        "",
        f"patch-speculators: error: {_expected(name)}\n",
    )


def test_rules_check_cli_ok(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(GOOD)
    result = CliRunner().invoke(main, ["rules", "check", str(good)])
    assert (result.exit_code, result.stdout, result.stderr) == (0, "2 rules OK in 1 file\n", "")


def test_rule_file_size_is_bounded(tmp_path: Path) -> None:
    from vllm_shim_patch.rules.loader import MAX_RULE_FILE_BYTES

    big = tmp_path / "big.yaml"
    body = GOOD + "#" * (MAX_RULE_FILE_BYTES - len(GOOD.encode()))
    big.write_text(body)
    assert len(load_pack([big], bundled=False).rules) == 2  # exactly at the bound: read
    big.write_text(body + "#")
    with pytest.raises(RuleError) as info:
        load_pack([big], bundled=False)
    assert str(info.value) == f"{big}: larger than 1024 KiB: rule files are hand-written; split it into several files"


def test_alias_bomb_is_refused_at_its_first_anchor(tmp_path: Path) -> None:
    # Each level doubles the size: without the refusal this expands to 2**30 snippets.
    levels = "".join(f"    l{i}: &l{i} [*l{i - 1}, *l{i - 1}]\n" for i in range(1, 31))
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text('schema: 1\nrules:\n  - id: bomb\n    call: vllm.x.Y\n    since: "0.17"\n    why: w\n'
                    '    drop: [a]\n    unchanged: &l0 ["Y()"]\n' + levels)
    with pytest.raises(RuleError) as info:
        load_pack([bomb], bundled=False)
    assert str(info.value) == f"{bomb}:8: YAML anchor &l0 is not allowed: rule files spell every value out"


def test_load_pack_missing_path(tmp_path: Path) -> None:
    with pytest.raises(RuleError) as info:
        load_pack([tmp_path / "nope.yaml"], bundled=False)
    assert str(info.value) == f"{tmp_path}/nope.yaml: no such rule file or folder"


def test_load_pack_empty_folder(tmp_path: Path) -> None:
    with pytest.raises(RuleError) as info:
        load_pack([tmp_path], bundled=False)
    assert str(info.value) == f"{tmp_path}: folder holds no *.yaml rule file"


# -- yaml loading is safe ----------------------------------------------------------------------


def test_python_object_tag_rejected_and_never_constructed(tmp_path: Path) -> None:
    marker = tmp_path / "constructed"
    text = (
        "schema: 1\n"
        "rules:\n"
        "  - id: sneaky\n"
        "    call: vllm.x.Y\n"
        '    since: "0.17"\n'
        "    why: w\n"
        "    drop: [a]\n"
        f"    notice: !!python/object/apply:builtins.exec [\"open({str(marker)!r}, 'w').close()\"]\n"
    )
    with pytest.raises(RuleError) as info:
        parse_rules(text, "sneaky.yaml")
    assert str(info.value) == (
        "sneaky.yaml:8: rule 'sneaky': YAML tag '!!python/object/apply:builtins.exec' is not allowed:"
        " rule files hold plain strings, lists and mappings"
    )
    assert not marker.exists()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            "--- !!python/object:os.PathLike {}\n",
            "root.yaml:1: YAML tag '!!python/object:os.PathLike' is not allowed: rule files hold plain"
            " strings, lists and mappings",
            id="root-tag",
        ),
        pytest.param(
            "schema: 1\nrules: !custom []\n",
            "root.yaml:2: YAML tag '!custom' is not allowed: rule files hold plain strings, lists and"
            " mappings",
            id="local-tag",
        ),
        pytest.param(
            "schema: 1\nrules:\n  - !!python/name:os.system\n",
            "root.yaml:3: YAML tag '!!python/name:os.system' is not allowed: rule files hold plain"
            " strings, lists and mappings",
            id="tag-on-a-rule",
        ),
    ],
)
def test_other_tags_rejected(text: str, message: str) -> None:
    with pytest.raises(RuleError) as info:
        parse_rules(text, "root.yaml")
    assert str(info.value) == message


# -- what a good file loads to -----------------------------------------------------------------

GOOD = """\
schema: 1
package: speculators
rules:
  - id: drop-eos
    call: [vllm.v1.request.Request, vllm.Request]
    since: 0.17  # unquoted: read as written, not as a float
    signature: (request_id, eos_token_id, arrival_time=None)
    drop: [eos_token_id]
    why: >-
      gone in
      0.17
    examples:
      - before: |
          from vllm.v1.request import Request
          Request("r", 2)
        after: |
          from vllm.v1.request import Request
          Request("r")
    unchanged:
      - |
        from requests import Request
        Request("r", 2)
  - id: add-bs
    call: vllm.v1.core.sched.scheduler.Scheduler
    since: "0.10"
    add:
      block_size: " {vllm_config}.cache_config.block_size "
    rename: {log_stats: stats}
    why: w
"""


def test_good_file_loads_to_frozen_rules() -> None:
    drop, add = parse_rules(GOOD, "good.yaml")
    assert drop == Rule(
        id="drop-eos",
        calls=("vllm.v1.request.Request", "vllm.Request"),
        since=Version("0.17"),
        why="gone in 0.17",
        path="good.yaml",
        line=4,
        signature=OldSignature(
            "(request_id, eos_token_id, arrival_time=None)",
            ("request_id", "eos_token_id", "arrival_time"),
            frozenset({"request_id", "eos_token_id", "arrival_time"}),
            False,
        ),
        ops=(("drop", ("eos_token_id",)),),
        examples=(
            Example(
                'from vllm.v1.request import Request\nRequest("r", 2)\n',
                'from vllm.v1.request import Request\nRequest("r")\n',
                13,
            ),
        ),
        unchanged=('from requests import Request\nRequest("r", 2)\n',),
    )
    assert (drop.operations, drop.short_names) == (("drop",), frozenset({"Request"}))
    assert (add.since, add.op("add"), add.op("rename"), add.operations) == (
        Version("0.10"),
        (("block_size", "{vllm_config}.cache_config.block_size"),),
        (("log_stats", "stats"),),
        ("add", "rename"),
    )


def test_bundled_pack_loads() -> None:
    pack = load_pack()
    rows = tree.rules()
    # Files in name order, each rule in file order, as the source tree holds them.
    assert [(r.id, str(r.since), r.operations, r.target) for r in pack.rules] == rows
    # A move is guarded by what it implies: the old module lacks the name, the new one has it.
    move = next(r for r in pack.rules if r.id == "get-kv-cache-config-from-groups-move")
    assert (move.guard.defines, move.guard.lacks) == (
        ("vllm.v1.core.kv_cache_planning.get_kv_cache_config_from_groups",),
        ("vllm.v1.core.kv_cache_utils.get_kv_cache_config_from_groups",))


def test_scoped_rules_carry_their_guards() -> None:
    pack = load_pack()
    assert pack.by_id("llama-model-embed-input-ids").guard == Guard(
        defines=("vllm.model_executor.models.llama.LlamaModel.embed_input_ids",),
        lacks=("vllm.model_executor.models.llama.LlamaModel.get_input_embeddings",),
    )
    assert pack.by_id("executor-sample-tokens").guard == Guard(
        defines=("vllm.v1.executor.multiproc_executor.MultiprocExecutor.sample_tokens",))
    assert pack.by_id("collective-rpc-single-reply").guard == Guard(
        accepts=(("vllm.v1.executor.multiproc_executor.MultiprocExecutor.collective_rpc", "kv_output_aggregator"),))


def test_a_guard_name_may_carry_the_sentence_its_failing_means() -> None:
    """generator-v1-runner: V1's module gone reads "V1 gone", not "V1 the only runner"; the
    reasons keep the rule's order, and a plain list beside them has none."""
    pack = load_pack()
    v1 = "vllm.v1.worker.gpu_model_runner"
    assert pack.by_id("generator-v1-runner").guard == Guard(
        defines=(v1, "vllm.config.VllmConfig.use_v2_model_runner"),
        reasons=((v1, "Model Runner V1 is gone (no vllm.v1.worker.gpu_model_runner): the worker runs on Model "
                      "Runner V2 (worker-v2-forward-batch)"),
                 ("vllm.config.VllmConfig.use_v2_model_runner",
                  "Model Runner V1 is its only runner (VllmConfig does not define use_v2_model_runner)")))
    assert pack.by_id("worker-v2-forward-batch").guard == Guard(
        defines=("vllm.v1.worker.gpu.model_runner.GPUModelRunner.prepare_inputs",),
        lacks=(v1,),
        reasons=((v1, "the worker still runs on Model Runner V1 (vllm.v1.worker.gpu_model_runner is there), whose "
                      "input_batch it reads (generator-v1-runner keeps it on V1)"),))

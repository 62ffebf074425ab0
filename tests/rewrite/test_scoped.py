"""Scoped rules (`in:`): guards, regions that are missing, and codemods that fail closed."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from packaging.version import Version

from vllm_shim_patch.errors import CodemodError
from vllm_shim_patch.rewrite.engine import Engine
from vllm_shim_patch.rewrite.scoped import Scope, line_map, module_of
from vllm_shim_patch.rules.loader import load_file

METHOD = """\
schema: 1
rules:
  - id: embed
    in: pkg.worker:forward
    since: "0.11.1"
    method:
      receiver: self
      rename: {get_input_embeddings: embed_input_ids}
      classes: [vllm.m.LlamaModel]
    why: renamed
"""

SOURCE = b"def forward(self, ids):\n    return self.get_input_embeddings(ids)\n"
RENAMED = b"def forward(self, ids):\n    return self.embed_input_ids(ids)\n"
DEFINES, LACKS = "vllm.m.LlamaModel.embed_input_ids", "vllm.m.LlamaModel.get_input_embeddings"


def _rules(tmp_path: Path, text: str, codemods: dict[str, str] | None = None) -> list:
    for name, code in (codemods or {}).items():
        (tmp_path / "codemods").mkdir(exist_ok=True)
        (tmp_path / "codemods" / f"{name}.py").write_text(textwrap.dedent(code))
    path = tmp_path / "rules.yaml"
    path.write_text(text)
    return load_file(path)


@pytest.mark.parametrize(
    ("facts", "version", "after", "action", "message", "guarded"),
    [
        pytest.param({DEFINES: True, LACKS: False}, "0.10", RENAMED, "edited",
                     "rename self.get_input_embeddings to embed_input_ids", True, id="guard-says-yes-before-since"),
        pytest.param({DEFINES: False, LACKS: True}, "0.17", SOURCE, "not-needed",
                     "not needed for this vLLM: LlamaModel does not define embed_input_ids", True,
                     id="guard-says-no-after-since"),
        pytest.param({DEFINES: None, LACKS: None}, "0.12", RENAMED, "edited",
                     "rename self.get_input_embeddings to embed_input_ids", False, id="unknown-since-decides"),
        pytest.param(None, "0.11", SOURCE, "not-needed", "not needed before vLLM 0.11.1", False,
                     id="unguarded-before-since"),
    ],
)
def test_guard_decides_then_since(tmp_path: Path, facts: dict | None, version: str, after: bytes, action: str,
                                  message: str, guarded: bool) -> None:
    result = Engine(_rules(tmp_path, METHOD), Version(version), facts=facts).transform(SOURCE, "pkg/worker.py")
    assert result.after == after
    line = 2 if action == "edited" else 1  # the call's line, or the region's `def` line
    assert [(s.action, s.line, s.message, s.guarded) for s in result.sites] == [(action, line, message, guarded)]


def test_other_modules_are_not_touched(tmp_path: Path) -> None:
    result = Engine(_rules(tmp_path, METHOD), Version("0.16")).transform(SOURCE, "pkg/other.py")
    assert (result.status, result.sites) == ("unchanged", ())


def test_a_missing_region_is_loud(tmp_path: Path) -> None:
    result = Engine(_rules(tmp_path, METHOD), Version("0.16")).transform(b"x = 1\n", "pkg/worker.py")
    assert [(s.action, s.message) for s in result.sites] == [
        ("needs-human", "pkg.worker:forward is not in this file: the rule matches nothing")
    ]


CODEMOD_RULE = """\
schema: 1
rules:
  - id: scoped
    in: pkg.worker:forward
    since: "0.1"
    codemod: {name}
    why: w
"""


def test_a_codemod_that_raises_fails_its_file(tmp_path: Path) -> None:
    rules = _rules(tmp_path, CODEMOD_RULE.format(name="raises"), {"raises": """
        from vllm_shim_patch.rewrite.scoped import ScopedTransform

        class Codemod(ScopedTransform):
            def leave_Name(self, original_node, updated_node):
                raise ValueError("boom")
    """})
    result = Engine(rules, Version("0.16")).transform(SOURCE, "pkg/worker.py")
    assert (result.status, result.after) == ("failed", SOURCE)
    assert result.reason == "rule scoped: codemod 'raises' ValueError: boom"


def test_a_codemod_that_loops_is_stopped(tmp_path: Path) -> None:
    rules = _rules(tmp_path, CODEMOD_RULE.format(name="loops"), {"loops": """
        from vllm_shim_patch.rewrite.scoped import ScopedTransform

        class Codemod(ScopedTransform):
            def leave_Name(self, original_node, updated_node):
                while True:
                    pass
    """})
    result = Engine(rules, Version("0.16"), codemod_seconds=0.2).transform(SOURCE, "pkg/worker.py")
    assert (result.status, result.reason) == (
        "failed", "rule scoped: codemod 'loops' TimeLimit: ran past its time limit (0.2 s)")


@pytest.mark.parametrize(
    ("code", "message"),
    [
        pytest.param("import sys\nsys.exit(0)\n", "calls SystemExit(0) at import (a codemod must not end the run)",
                     id="exits"),
        pytest.param("raise ImportError('no')\n", "fails to import: ImportError: no", id="raises"),
        pytest.param("def rewrite(call, site):\n    return call\n",
                     "defines no class Codemod(ScopedTransform) for an 'in:' rule", id="wrong-shape"),
    ],
)
def test_a_codemod_that_cannot_load_is_a_rule_error(tmp_path: Path, code: str, message: str) -> None:
    rules = _rules(tmp_path, CODEMOD_RULE.format(name="bad"), {"bad": code})
    with pytest.raises(CodemodError) as info:
        Engine(rules, Version("0.16"))
    assert str(info.value) == (
        f"{tmp_path}/rules.yaml:3: rule 'scoped': codemod 'bad' ({tmp_path}/codemods/bad.py) {message}")


def test_scope_and_module_names() -> None:
    assert Scope.parse("a.b:C.f") == Scope("a.b", ("C", "f"))
    assert str(Scope.parse("a.b")) == "a.b"
    assert Scope.parse("a.b:C.f").def_line(b"x = 1\nclass C:\n    def f(self):\n        pass\n") == 3
    assert (module_of("pkg/sub/mod.py"), module_of("pkg/__init__.py"), module_of("<case>")) == (
        "pkg.sub.mod", "pkg", None)


def test_line_map_names_the_original_line() -> None:
    to_original = line_map("a\nb\nc\n", "a\nb\nnew\nc\n")
    assert [to_original(n) for n in (1, 2, 3, 4)] == [1, 2, 2, 3]


def test_a_codemod_sees_the_whole_module_and_its_lines(tmp_path: Path) -> None:
    """The codemod contract: every node is visited (a codemod may gather from outside its region,
    with each visit_X paired with its leave_X), and positions are there during the visit."""
    rules = _rules(tmp_path, CODEMOD_RULE.format(name="whole"), {"whole": """
        from libcst.metadata import PositionProvider
        from vllm_shim_patch.rewrite.scoped import ScopedTransform

        class Codemod(ScopedTransform):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, **kwargs)
                self.depth, self.names = 0, []

            def visit_FunctionDef(self, node):
                self.depth += 1
                self.names.append((node.name.value, self.get_metadata(PositionProvider, node).start.line))

            def leave_FunctionDef(self, original_node, updated_node):
                self.depth -= 1
                assert self.depth >= 0, "a leave without its visit"
                if self.at_scope and self.names != [("helper", 1), ("forward", 3)]:
                    raise ValueError(f"saw {self.names}")
                return updated_node
    """})
    source = b"def helper():\n    pass\ndef forward(self, ids):\n    return self.get_input_embeddings(ids)\n"
    result = Engine(rules, Version("0.16")).transform(source, "pkg/worker.py")
    assert (result.status, result.reason) == ("unchanged", "")
    assert [(s.action, s.message) for s in result.sites] == [("already", "nothing to change")]


def test_a_region_only_codemod_enters_its_region_alone(tmp_path: Path) -> None:
    """`region_only`: the nodes outside the region (and off the way to it) are not entered; the ones
    it does not enter still get their visit_X and leave_X; the result is the same."""
    rules = _rules(tmp_path, CODEMOD_RULE.format(name="only"), {"only": """
        import libcst as cst
        from vllm_shim_patch.rewrite.scoped import ScopedTransform

        class Codemod(ScopedTransform):
            region_only = True
            SEEN = []

            def visit_Name(self, node):
                self.SEEN.append(node.value)

            def visit_FunctionDef(self, node):
                self.SEEN.append("def " + node.name.value)

            def leave_Call(self, original_node, updated_node):
                if self.in_scope and isinstance(updated_node.func, cst.Attribute):
                    self.edited(original_node, "renamed")
                    return updated_node.with_changes(func=updated_node.func.with_changes(attr=cst.Name("embed")))
                return updated_node
    """})
    source = (b"import os\nX = os.getenv('a')\ndef helper():\n    return self.get_input_embeddings(1)\n"
              b"if X:\n    def forward(self, ids):\n        return self.get_input_embeddings(ids)\n")
    result = Engine(rules, Version("0.16")).transform(source, "pkg/worker.py")
    assert result.after == source.replace(b"self.get_input_embeddings(ids)", b"self.embed(ids)")
    assert [(s.line, s.action, s.message) for s in result.sites] == [(7, "edited", "renamed")]
    from vllm_shim_patch.rewrite.ops import compile_rule

    assert compile_rule(rules[0])[0].SEEN == ["def helper", "X", "def forward", "forward", "self", "ids", "self",
                           "get_input_embeddings", "ids"]


TWO_DROPS = """\
schema: 1
rules:
  - id: first
    in: pkg.worker:forward
    since: "0.1"
    codemod: unuse
    why: w
  - id: second
    in: pkg.worker:helper
    since: "0.1"
    codemod: unuse
    why: w
"""

# Replaces the region's `return NAME.x(...)` by `return None`, then drops NAME's import.
UNUSE = """
    import libcst as cst
    from vllm_shim_patch.rewrite.scoped import ScopedTransform, drop_unused_import

    class Codemod(ScopedTransform):
        region_only = True
        dropped = None

        def leave_Return(self, original_node, updated_node):
            value = updated_node.value
            if self.in_scope and isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute):
                self.dropped = value.func.value.value
                self.edited(original_node, f"no {self.dropped}")
                return updated_node.with_changes(value=cst.Name("None"))
            return updated_node

        def leave_Module(self, original_node, updated_node):
            if self.dropped is None:
                return updated_node
            return drop_unused_import(self, original_node, updated_node, self.dropped, None,
                                      f"drop the import of {self.dropped}")
"""


def test_the_imports_a_files_codemods_drop_go_in_one_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """libcst's RemoveImportsVisitor (its scope analysis of the whole module: the costliest step of
    a dry run) runs once per file for all its codemods' drops; where the tokens show nothing else
    can use them, not at all for a line that imports the one name alone (it goes whole), and over
    the import statements alone otherwise (tests/rewrite/test_import_drops.py); each import that
    goes is an edit of the rule that dropped it, right after that rule's own edits; one still used
    stays."""
    from libcst.codemod.visitors import RemoveImportsVisitor

    runs: list[int] = []  # the statements of each module the visitor is run over
    real = RemoveImportsVisitor.transform_module
    monkeypatch.setattr(RemoveImportsVisitor, "transform_module",
                        lambda self, tree: runs.append(len(tree.body)) or real(self, tree))
    rules = _rules(tmp_path, TWO_DROPS, {"unuse": UNUSE})
    source = (b"import os\nimport json\nimport sys\n\n\ndef forward(self):\n    return os.getcwd()\n\n\n"
              b"def helper():\n    return json.dumps(1)\n\n\ndef other():\n    return sys.path\n")
    after = (b"import sys\n\n\ndef forward(self):\n    return None\n\n\n"
             b"def helper():\n    return None\n\n\ndef other():\n    return sys.path\n")
    sites = [("first", 7, "edited", "no os"), ("first", 1, "edited", "drop the import of os"),
             ("second", 11, "edited", "no json"), ("second", 2, "edited", "drop the import of json")]
    for prefilter, passes in [(True, []), (False, [6])]:
        runs.clear()
        result = Engine(rules, Version("0.16"), prefilter=prefilter).transform(source, "pkg/worker.py")
        assert result.after == after
        assert [(s.rule_id, s.line, s.action, s.message) for s in result.sites] == sites
        assert runs == passes
    still_used = source.replace(b"return sys.path", b"return os.sep")
    runs.clear()
    result = Engine(rules, Version("0.16")).transform(still_used, "pkg/worker.py")
    assert result.after.startswith(b"import os\nimport sys\n")
    assert [(s.rule_id, s.message) for s in result.sites] == [
        ("first", "no os"), ("second", "no json"), ("second", "drop the import of json")]
    assert runs == [6]  # `os` is used elsewhere: the whole module decides


def test_declining_the_hunk_of_a_dropped_import_declines_its_rule(tmp_path: Path) -> None:
    """The import a codemod drops is one of its rule's edits: declining its hunk declines them all
    (each a declined site), and the import stays."""
    rules = _rules(tmp_path, TWO_DROPS, {"unuse": UNUSE})
    source = (b"import os\nimport json\nimport sys\n\n\ndef forward(self):\n    return os.getcwd()\n\n\n"
              b"def helper():\n    return json.dumps(1)\n\n\ndef other():\n    return sys.path\n")
    result = Engine(rules, Version("0.16"), declined=frozenset({("pkg/worker.py", 1, "first")})).transform(
        source, "pkg/worker.py")
    assert result.after == source.replace(b"import json\n", b"").replace(b"return json.dumps(1)", b"return None")
    assert [(s.rule_id, s.line, s.action) for s in result.sites] == [
        ("first", 7, "declined"), ("first", 1, "declined"), ("second", 11, "edited"), ("second", 2, "edited")]


def test_a_file_whose_rules_are_not_needed_is_not_parsed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No call can match and no region's rule applies to this vLLM: the "not needed" sites come
    from `ast`, as the full pass (`prefilter=False`) records them, and libcst never runs."""
    from vllm_shim_patch.rewrite import engine as engine_module

    rules = _rules(tmp_path, METHOD)
    full = Engine(rules, Version("0.10"), prefilter=False).transform(SOURCE, "pkg/worker.py")

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("parsed")

    monkeypatch.setattr(engine_module.cst, "parse_module", refuse)
    fast = Engine(rules, Version("0.10")).transform(SOURCE, "pkg/worker.py")
    assert fast == full
    assert [(s.action, s.line, s.message) for s in fast.sites] == [("not-needed", 1, "not needed before vLLM 0.11.1")]
    broken = b"def forward(self:\n"  # ast cannot read it: the full pass says why
    monkeypatch.undo()
    assert (Engine(rules, Version("0.10")).transform(broken, "pkg/worker.py")
            == Engine(rules, Version("0.10"), prefilter=False).transform(broken, "pkg/worker.py"))


UNBIND_RULES = """\
schema: 1
rules:
  - id: unbind
    in: pkg.worker
    since: "0.1"
    codemod: unbind
    why: w
  - id: embed
    in: pkg.worker:patched
    since: "0.11.1"
    method:
      receiver: self
      rename: {get_input_embeddings: embed_input_ids}
      classes: [vllm.m.LlamaModel]
    why: renamed
"""

# `model.forward = patched` becomes the model's own forward: `patched` is no longer bound.
UNBIND = """
    import libcst as cst
    from vllm_shim_patch.rewrite.scoped import ScopedTransform, statements

    class Codemod(ScopedTransform):
        region_only = True

        def leave_SimpleStatementLine(self, original_node, updated_node):
            code = cst.Module([]).code_for_node(original_node).strip()
            if self.in_scope and code == "model.forward = model.own_forward":
                self.unbinds("patched")  # done already: unbound as well
            if self.in_scope and code == "model.forward = patched":
                self.edited(original_node, "the model's own forward")
                self.unbinds("patched")
                new = statements("model.forward = model.own_forward", self.module)[0]
                return new.with_changes(leading_lines=original_node.leading_lines)
            return updated_node
"""

UNBOUND_SOURCE = (b"def patched(self, ids):\n    return self.get_input_embeddings(ids)\n\n\n"
                  b"model.forward = patched\n")


@pytest.mark.parametrize(("source", "declined", "embed"), [
    pytest.param(UNBOUND_SOURCE, frozenset(), "not-needed", id="unbound"),
    pytest.param(UNBOUND_SOURCE + b"__all__ = ['patched']\n", frozenset(), "edited", id="exported"),
    pytest.param(UNBOUND_SOURCE + b"again = patched\n", frozenset(), "edited", id="bound-elsewhere"),
    pytest.param(UNBOUND_SOURCE, frozenset({("pkg/worker.py", 5, "unbind")}), "edited", id="unbinding-declined"),
    pytest.param(UNBOUND_SOURCE.replace(b"= patched", b"= model.own_forward"), frozenset(), "not-needed",
                 id="planned-again"),
])
def test_a_rule_for_code_another_rule_unbinds_is_not_needed(tmp_path: Path, source: bytes,
                                                            declined: frozenset, embed: str) -> None:
    """No edit to dead code: a scoped rule whose region is a function an earlier rule's kept edit
    leaves unbound (and nothing in the module refers to any more) is reported as not needed, at
    the lines it would have changed, naming that rule; where anything still refers to it, or the
    unbinding edit is declined, the rule edits as before."""
    rules = _rules(tmp_path, UNBIND_RULES, {"unbind": UNBIND})
    result = Engine(rules, Version("0.16"), declined=declined).transform(source, "pkg/worker.py")
    sites = [(s.rule_id, s.line, s.action, s.message, s.by) for s in result.sites if s.rule_id == "embed"]
    if embed == "edited":
        assert sites == [("embed", 2, "edited", "rename self.get_input_embeddings to embed_input_ids", "")]
        assert b"self.embed_input_ids(ids)" in result.after
        return
    assert sites == [("embed", 2, "not-needed", "not needed: unbind leaves patched unbound and nothing in the "
                      "module refers to it (would rename self.get_input_embeddings to embed_input_ids)", "unbind")]
    assert result.after == source.replace(b"model.forward = patched", b"model.forward = model.own_forward")
    again = Engine(rules, Version("0.16")).transform(result.after, "pkg/worker.py")
    assert (again.status, [s.action for s in again.sites]) == ("unchanged", ["already", "not-needed"])


def _speculators_sources(version: str) -> dict[str, bytes]:
    import sys
    import zipfile

    sys.path.insert(0, str(Path(__file__).parents[1]))
    try:
        import realdata
    finally:
        sys.path.pop(0)
    with zipfile.ZipFile(realdata.speculators_wheel(version)) as zf:
        return {n: zf.read(n) for n in zf.namelist()
                if n.startswith("speculators/data_generation/") and n.endswith(".py")}


@pytest.mark.slow  # the real wheels
@pytest.mark.parametrize("version", ["0.3.0", "0.4.0", "0.4.0.1"])
def test_bundled_scoped_rules_region_only_change_nothing(version: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The bundled scoped transforms that set `region_only` write and report exactly what a visit of
    the whole module does, on speculators' own modules (0.17: every scoped rule applies)."""
    from vllm_shim_patch.rewrite.ops import compile_rule
    from vllm_shim_patch.rules.loader import load_pack

    rules = [r for r in load_pack().rules if r.scope is not None]
    transforms = [t for r in rules for t in compile_rule(r)]
    assert transforms and all(t.region_only for t in transforms)
    sources = _speculators_sources(version)
    # No time limit: a whole-module visit on a loaded machine must not fail one side alone.
    engine = Engine(rules, Version("0.17"), codemod_seconds=None)
    fast = {path: engine.transform(data, path) for path, data in sources.items()}
    for t in transforms:
        monkeypatch.setattr(t, "region_only", False)
    whole = {path: engine.transform(data, path) for path, data in sources.items()}
    assert fast == whole
    assert any(r.status == "changed" for r in fast.values()) or version != "0.3.0"

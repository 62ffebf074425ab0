"""libyaml's composer (the fast path of the rule loader) against PyYAML's pure-Python one: the same
node tree on every shipped rule file and every malformed one, and the slow path wherever it must
speak (a syntax error, an anchor or alias)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from vllm_shim_patch.rules import loader
from vllm_shim_patch.rules.loader import bundled_rule_files, parse_rules

MALFORMED = Path(__file__).parent / "malformed"
# The rule files of the source tree: what the wheel ships must be exactly these (and some).
SHIPPED = sorted(p.name for p in (Path(__file__).resolve().parents[2] / "rules").glob("*.yaml"))
assert SHIPPED, "no rules/*.yaml in the source tree"
# not-utf8.yaml is refused before YAML is read (test_loader covers it).
TEXTS = {p.name: p for p in [*bundled_rule_files(), *sorted(MALFORMED.glob("*.yaml"))]
         if p.name != "not-utf8.yaml"}

pytestmark = pytest.mark.skipif(not hasattr(yaml, "CSafeLoader"), reason="PyYAML built without libyaml")


def shape(node: Any) -> Any:
    """A node tree as plain data: class, tag, line, and the value (children recursively)."""
    if node is None:
        return None
    if isinstance(node, yaml.ScalarNode):
        value: Any = node.value
    elif isinstance(node, yaml.SequenceNode):
        value = [shape(n) for n in node.value]
    else:
        value = [(shape(k), shape(v)) for k, v in node.value]
    return type(node).__name__, node.tag, node.start_mark.line, value


def slow(text: str) -> Any:
    plain = loader._plain_loader(yaml)(text)
    try:
        return plain.get_single_node()
    finally:
        plain.dispose()


@pytest.mark.parametrize("name", sorted(TEXTS))
def test_fast_tree_equals_the_pure_python_one_or_defers_to_it(name: str) -> None:
    text = TEXTS[name].read_text(encoding="utf-8")
    fast = loader._compose_fast(yaml, text)
    try:
        reference = slow(text)
    except (yaml.YAMLError, loader._AliasError):
        assert fast is None  # the slow path then raises the message the user sees
        return
    assert (fast is None) == (reference is None)  # None: an empty file, the same on both
    assert shape(fast) == shape(reference)


def test_the_shipped_rules_are_the_same_rules_without_libyaml(monkeypatch: pytest.MonkeyPatch) -> None:
    files = bundled_rule_files()
    assert [p.name for p in files] == SHIPPED
    for path in files:
        text = path.read_text(encoding="utf-8")
        with_c = parse_rules(text, path)
        monkeypatch.setattr(loader, "_compose_fast", lambda yaml, text: None)
        without = parse_rules(text, path)
        monkeypatch.undo()
        assert with_c == without, path


def test_the_shipped_rules_take_the_fast_path() -> None:
    files = bundled_rule_files()
    assert [p.name for p in files] == SHIPPED
    for path in files:
        assert loader._compose_fast(yaml, path.read_text(encoding="utf-8")) is not None, path

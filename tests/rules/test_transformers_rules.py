"""The transformers rules, decided by the transformers installed in the target (`requires:`)."""

from __future__ import annotations

import pytest
from packaging.version import Version

from vllm_shim_patch.rewrite.engine import Engine
from vllm_shim_patch.rules.loader import load_pack
from vllm_shim_patch.versions import satisfies

PATH = "speculators/utils/pydantic_utils.py"
# speculators 0.3.0's reload_schema (0.4.0 and 0.4.0.1 have the same), trimmed to the method.
SOURCE = '''\
class ReloadableBaseModel(BaseModel):
    @classmethod
    def reload_schema(cls):
        """Reloads the schema for the class."""
        cls.model_rebuild(force=True)
'''
PATCHED = '''\
class ReloadableBaseModel(BaseModel):
    @classmethod
    def reload_schema(cls):
        """Reloads the schema for the class."""
        # transformers 5 annotates PretrainedConfig with torch.dtype but imports torch
        # only for type checkers: pydantic needs the name to rebuild the schema.
        import torch
        cls.model_rebuild(force=True, _types_namespace={"torch": torch})
'''
FACT = "transformers>=5"


def _rule():
    [rule] = [r for r in load_pack().rules if r.id == "pydantic-rebuild-torch-namespace"]
    return rule


@pytest.mark.parametrize(("fact", "version", "after", "site"), [
    pytest.param(True, Version("0.16"), PATCHED,
                 ("edited", 'rebuild with _types_namespace={"torch": torch} (transformers 5)', True),
                 id="transformers-5-before-since"),
    pytest.param(False, Version("0.33"), SOURCE,
                 ("not-needed", "not needed: the installed transformers is not >=5", True),
                 id="transformers-4-after-since"),
    # The package does not declare transformers: `since` decides, unguarded.
    pytest.param(None, Version("0.33"), PATCHED,
                 ("edited", 'rebuild with _types_namespace={"torch": torch} (transformers 5)', False),
                 id="unknown-since-applies"),
    pytest.param(None, Version("0.16"), SOURCE,
                 ("not-needed", "not needed before vLLM 0.24.0", False), id="unknown-before-since"),
])
def test_the_installed_transformers_decides(fact: bool | None, version: Version, after: str,
                                             site: tuple[str, str, bool]) -> None:
    result = Engine([_rule()], version=version, facts={FACT: fact}).transform(SOURCE.encode(), PATH)
    assert result.after.decode() == after
    assert [(s.action, s.message, s.guarded) for s in result.sites] == [site]


def test_a_rebuild_given_its_namespace_is_left_alone() -> None:
    fixed = SOURCE.replace("force=True)", 'force=True, _types_namespace={"torch": torch})')
    result = Engine([_rule()], version=Version("0.33"), facts={FACT: True}).transform(fixed.encode(), PATH)
    assert (result.changed, [(s.action, s.guarded) for s in result.sites]) == (False, [("already", True)])


@pytest.mark.parametrize(("installed", "spec", "expected"), [
    ("5.20.2", ">=5", True),
    ("4.57.6", ">=5", False),
    ("5.1.0rc1", ">=5", True),  # a pre-release is compared, not refused
    ("5.0.0rc1", ">=5", False),  # PEP 440: before 5.0.0
    (None, ">=5", False),  # declared, not installed
    ("not-a-version", ">=5", False),
])
def test_satisfies(installed: str | None, spec: str, expected: bool) -> None:
    assert satisfies(installed, spec) is expected

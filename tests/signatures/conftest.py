"""Fixtures of the signature suites; puts this folder on sys.path so `import sigcases` works."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from sigcases import TREE  # noqa: E402

from vllm_shim_patch.signatures import StaticSignatures  # noqa: E402


@pytest.fixture(scope="module")
def static() -> StaticSignatures:
    return StaticSignatures(TREE)

"""Signatures of vLLM callables, to guard rewrite rules and to bind call sites.

Two sources with one interface: `LiveSignatures` asks the target interpreter (`inspect`), and
`StaticSignatures` reads vLLM's installed source (or wheel) without importing it. Both answer
`None` when they cannot decide: a guard must never act on a guess.
"""

from __future__ import annotations

from vllm_shim_patch.signatures.live import LiveSignatures
from vllm_shim_patch.signatures.model import (
    PARAM_KINDS,
    BindResult,
    Param,
    Signature,
    SignatureSource,
)
from vllm_shim_patch.signatures.static import StaticSignatures

__all__ = [
    "PARAM_KINDS",
    "BindResult",
    "LiveSignatures",
    "Param",
    "Signature",
    "SignatureSource",
    "StaticSignatures",
]

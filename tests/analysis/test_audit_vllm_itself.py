"""vLLM's own source audited against itself: every name it uses exists in the same release, so
any mismatch is either a false report (a bug of ours) or a real bug of vLLM. The exact list."""

from __future__ import annotations

import pytest
import realdata

from vllm_shim_patch.analysis.audit import Checker, _check_file
from vllm_shim_patch.analysis.calls import scan_uses
from vllm_shim_patch.signatures.static.members import Members
from vllm_shim_patch.signatures.static import StaticSignatures

pytestmark = pytest.mark.slow


def mismatches(version: str, patterns: tuple[str, ...]) -> list[str]:
    root = realdata.vllm_source(version)
    source = StaticSignatures(root)
    members = Members(source.names)
    out = []
    for pattern in patterns:
        for path in sorted(root.glob(pattern)):
            rel = path.relative_to(root).as_posix()
            uses = scan_uses(path.read_bytes(), rel)
            sigs = source.get_many({u.callee for u in uses if u.is_call})
            out += [f"{rel}:{b.call.line}: {b.call.kind} {b.call.callee}: {b.reason}"
                    for b in _check_file(uses, Checker(sigs, "", members, source)) if b.status == "mismatch"]
    return out


def test_vllm_0110_v1_distributed_and_fused_moe() -> None:
    assert mismatches("0.11.0", ("vllm/v1/**/*.py", "vllm/distributed/**/*.py",
                                 "vllm/model_executor/layers/fused_moe/*.py")) == [
        # A real bug of vLLM 0.11.0: the attribute is `prepare_workspace_tensor` (all2all.py:397).
        "vllm/model_executor/layers/fused_moe/flashinfer_cutlass_prepare_finalize.py:231: attribute "
        "vllm.distributed.device_communicators.base_device_communicator.All2AllManagerBase.prepare_workspace: "
        "instance of vllm.distributed.device_communicators.base_device_communicator.All2AllManagerBase has no "
        "attribute 'prepare_workspace' (nor does any class of this vLLM)",
    ]


def test_vllm_0160_v1_entrypoints_lora_and_layers() -> None:
    assert mismatches(realdata.REFERENCE_VLLM, ("vllm/v1/**/*.py", "vllm/entrypoints/**/*.py", "vllm/lora/**/*.py",
                                 "vllm/model_executor/layers/*.py", "vllm/benchmarks/**/*.py",
                                 "vllm/platforms/*.py")) == [
        # Dead code in vLLM 0.16.0: _custom_ops.poly_norm was removed, the caller was not.
        "vllm/model_executor/layers/layernorm.py:62: call vllm._custom_ops.poly_norm: "
        "vllm._custom_ops has no name 'poly_norm'",
    ]

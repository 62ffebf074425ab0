"""A small wheel shaped like speculators': the fixture the fleet's pure tests build from."""

from __future__ import annotations

import io
import zipfile

from vllm_shim_patch.fleet import record

DIST_INFO = "speculators-0.4.0.dist-info"
WORKER = "speculators/data_generation/custom_worker.py"
GENERATOR = "speculators/data_generation/vllm_hidden_states_generator.py"
METADATA = """Metadata-Version: 2.4
Name: speculators
Version: 0.4.0
Summary: A unified library for speculative decoding algorithms.
Requires-Python: >=3.10
Description-Content-Type: text/markdown
License-File: LICENSE
Requires-Dist: click
Requires-Dist: torch<=2.10.0,>=2.9.0
Requires-Dist: transformers<=4.57.6,>=4.56.1
Provides-Extra: dev
Requires-Dist: pytest~=8.2.2; extra == "dev"
Provides-Extra: datagen
Requires-Dist: vllm<=0.16.0,>=0.12.0; extra == "datagen"

# Speculators

The description.
"""
WHEEL = "Wheel-Version: 1.0\nGenerator: setuptools (80.9.0)\nRoot-Is-Purelib: true\nTag: py3-none-any\n\n"


def original_files() -> dict[str, bytes]:
    files = {
        "speculators/__init__.py": b"from .config import *\n",
        WORKER: b"def capture(self):\n    return self.model.model\n",
        GENERATOR: b"class VllmHiddenStatesGenerator:\n    pass\n",
        f"{DIST_INFO}/METADATA": METADATA.encode(),
        f"{DIST_INFO}/WHEEL": WHEEL.encode(),
        f"{DIST_INFO}/entry_points.txt": b"[console_scripts]\nspeculators = speculators.__main__:app\n",
        f"{DIST_INFO}/top_level.txt": b"speculators\n",
        f"{DIST_INFO}/licenses/LICENSE": b"Apache License 2.0\n",
    }
    files[f"{DIST_INFO}/RECORD"] = record.write(sorted(files.items()), f"{DIST_INFO}/RECORD")
    return files


def as_zip(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return buffer.getvalue()


PATCHED = {WORKER: b"def capture(self):\n    return self.model.get_language_model()\n"}

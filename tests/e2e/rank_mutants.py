"""Rank mistakes only a world of more than one rank shows: each one edit of the PATCHED speculators
(0.3.0 and 0.4.0 patched for vLLM 0.16 write these lines alike), for the real-vLLM tests of the
tensor-parallel rehearsal. At tensor parallel 1 every one of them passes.

    python tests/e2e/rank_mutants.py SITE_PACKAGES NAME   # writes the mutant into SITE_PACKAGES
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

WORKER = "speculators/data_generation/custom_worker.py"
GENERATOR = "speculators/data_generation/vllm_hidden_states_generator.py"
# The generator's read of the capture, as the patched releases write it.
READ = re.compile(r'self\.executor\.collective_rpc\(\s*"_get_captured_states",\s*unique_reply_rank=0,\s*\)')
HOOK = re.compile(r"^        def hook\(module, args, output\):\n", re.M)
READ_DEF = re.compile(r"^    def _get_captured_states\(self\):\n", re.M)
METADATA_DEF = re.compile(r"^    def _set_request_metadata\(self, request_metadata[^)]*\):\n", re.M)
AFTER = "<the matched text>"  # in a replacement: the text the pattern matched, kept

# name -> (file, [(pattern or text, replacement, how many)]): a pattern is a compiled regex.
MUTANTS: dict[str, tuple[str, list[tuple[object, str, int | None]]]] = {
    # The capture hooks take the last tensor parallel rank's states, not rank 0's.
    "capture-rank": (WORKER, [("get_tp_group().rank_in_group == 0",
                               "get_tp_group().rank_in_group == get_tp_group().world_size - 1", None)]),
    # The generator reads the capture from the last rank (the executor's world), not rank 0.
    "output-rank": (GENERATOR, [(READ, 'self.executor.collective_rpc("_get_captured_states", '
                                       "unique_reply_rank=self.executor.world_size - 1)", 1)]),
    # The generator asks every rank and merges their replies as dicts of rows by request id.
    "reply-shape": (GENERATOR, [(READ, '{k: v for reply in self.executor.collective_rpc("_get_captured_states") '
                                       "for k, v in reply.items()}", 1)]),
    # One KV cache config for the whole world, not one per rank.
    "kv-configs": (GENERATOR, [("kv_cache_configs = [kv_cache_config] * tensor_parallel_size",
                                "kv_cache_configs = [kv_cache_config]", 1)]),
    # Rank 1 raises inside the model's forward (a capture hook): rank 0 waits in the next all-reduce.
    "raise-forward": (WORKER, [(HOOK, AFTER + "            if get_tp_group().rank_in_group == 1:\n"
                                "                raise RuntimeError(\"rank 1 raises in its capture hook\")\n", 1)]),
    # Rank 1's process exits with status 7 in its second _set_request_metadata.
    "rank-dies": (WORKER, [(METADATA_DEF, AFTER
                            + "        if get_tp_group().rank_in_group == 1 and getattr(self, \"_vsp_calls\", 0) == 1:\n"
                            "            import os\n            os._exit(7)\n"
                            "        self._vsp_calls = getattr(self, \"_vsp_calls\", 0) + 1\n", 1)]),
    # Rank 1 hangs in its first _set_request_metadata, saying so in the file VSP_TEST_HANG_FLAG
    # names: the run never ends by itself (a test interrupts it there).
    "rank-hangs": (WORKER, [(METADATA_DEF, AFTER
                             + "        if get_tp_group().rank_in_group == 1:\n"
                             "            import os, time\n"
                             "            open(os.environ[\"VSP_TEST_HANG_FLAG\"], \"w\").close()\n"
                             "            time.sleep(3600)\n", 1)]),
}


def mutate(text: str, name: str) -> str:
    """`text` (the file MUTANTS names) with the mutant's edits; an edit that matches another
    number of times than it says is an error (the patched lines moved)."""
    for old, new, count in MUTANTS[name][1]:
        if isinstance(old, re.Pattern):
            found = len(old.findall(text))
            text = old.sub(lambda m, new=new: new.replace(AFTER, m.group(0)), text)
        else:
            found = text.count(old)
            text = text.replace(old, new)
        if not found or (count is not None and found != count):
            raise ValueError(f"mutant {name}: {old!r} found {found} times")
    return text


def write(site: Path, name: str) -> tuple[Path, bytes]:
    """Write the mutant into `site`; (the file, its bytes before) to put back."""
    path = site / MUTANTS[name][0]
    before = path.read_bytes()
    path.write_text(mutate(before.decode(), name))
    return path, before


if __name__ == "__main__":
    write(Path(sys.argv[1]), sys.argv[2])

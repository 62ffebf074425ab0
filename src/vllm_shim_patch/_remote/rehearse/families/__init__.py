"""The model families the rehearsal can build: one module each, selected by architecture.

A family module defines NAME, ARCHITECTURES, DESCRIPTION, REAL and STOOD_IN (reported
verbatim), `config()` (the tiny config.json), `build()` (its stand-ins, after vLLM imports),
`self_check(run, parts)` and `reference_states(model, prompt, layers)` (the independent
per-prompt forward the captures are compared with). Adding a family: one module, one entry.
"""

from . import llama

FAMILIES = {llama.NAME: llama}
DEFAULT = llama.NAME


def supported():
    return sorted(a for f in FAMILIES.values() for a in f.ARCHITECTURES)


def for_architecture(arch):
    for family in FAMILIES.values():
        if arch in family.ARCHITECTURES:
            return family
    return None

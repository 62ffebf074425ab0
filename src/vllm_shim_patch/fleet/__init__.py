"""The patch as a package: a reproducible patched wheel for a vLLM series, and the recognition of
an installation from one.

One module per concern, each usable (and tested) alone:

- `naming`       the series, the PEP 440 local version, the wheel's and the dist-info's names, the
                 `vllm` requirement a series means
- `requirements` speculators' `Requires-Dist` against vLLM's: what conflicts, what is relaxed, why
- `metadata`     METADATA rewritten (version, requirements, the note on what the wheel carries)
- `provenance`   `vsp/patch.json` in the dist-info: what the wheel carries, for machines
- `record`       RECORD written and checked
- `archive`      the zip written reproducibly, to a temporary name, then renamed
- `build`        the wheel from the original wheel's files and the patched bytes
- `installed`    an installed patched wheel recognised, its files checked, its original rebuilt
- `digest`       the digest of the rules a wheel was built with
- `rehearsed`    the series the compatibility matrix rehearsed (docs/compatibility.md)

Nothing here runs the engine or the target: the command layer hands in the bytes and the facts.
"""

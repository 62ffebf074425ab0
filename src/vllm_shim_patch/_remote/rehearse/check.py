"""Every returned sequence against a forward of its own prompt: which are wrong, and how.

The comparison is data against data; the diagnosis attributes each captured row to the prompt
and row of the call it equals, so a report can say "prompt 4 has 1,945 own rows then 102 of
prompt 5's". Imports torch only inside the functions (the module itself is pure).
"""

from typing import Any

# Largest relative difference from the per-prompt forward that still counts as the same states.
TOLERANCE = 1e-3
# Attributing a row to a prompt asks for the same numbers (batched and single forwards agree to
# rounding), so a row is not mistaken for a neighbouring position of the same token.
SAME_ROW = 1e-5


def relative(a, b):
    scale = float(b.abs().max()) or 1.0
    return float((a.float() - b).abs().max()) / scale


def segments(rows, refs, tolerance=SAME_ROW):
    """Runs of captured rows attributed to (prompt, first row, count); prompt None: no match.

    `rows` is one layer's captured tensor, `refs` that layer's per-prompt references."""
    import torch

    if rows.shape[0] == 0:
        return []
    # float64: cdist takes the |a|^2 + |b|^2 - 2ab route for batches, which in float32 loses the
    # last digits of states of norm ~100 and would call an exact row a stranger's.
    table = torch.cat(refs, dim=0).double()
    starts = [0]
    for r in refs:
        starts.append(starts[-1] + r.shape[0])
    scale = float(table.abs().max()) or 1.0
    limit = tolerance * scale * (table.shape[1] ** 0.5)
    out: list[Any] = []
    for lo in range(0, rows.shape[0], 512):
        dist = torch.cdist(rows[lo:lo + 512].double(), table)
        for k in range(dist.shape[0]):
            # A row equal to the next row of the current run continues it: two prompts can hold
            # the same state at a row, and the run is the likelier explanation.
            if out and out[-1][0] is not None:
                j, r = out[-1][0], out[-1][1] + out[-1][2]
                if r < refs[j].shape[0] and float(dist[k, starts[j] + r]) <= limit:
                    out[-1][2] += 1
                    continue
            best = int(dist[k].argmin())
            if float(dist[k, best]) > limit:
                j = r = None
            else:
                j = max(i for i in range(len(refs)) if starts[i] <= best)
                r = best - starts[j]
            if out and out[-1][0] is None and j is None:
                out[-1][2] += 1
            else:
                out.append([j, r, 1])
    return [tuple(s) for s in out]


def call_problems(prompts, results, layers, refs, tolerance=TOLERANCE, attribute=True):
    """One entry per wrong sequence of a call (empty: every sequence is right).

    refs[i][layer] is the reference of prompt i. An entry: {"prompt", "expected", "rows",
    "input_ids_of" (the prompt whose ids came back, or None), "segments", "layer"}; "segments"
    empty without `attribute` (which rows are whose: the report's, not the verdict's)."""
    problems = []
    worst = 0.0
    if len(results) != len(prompts):
        return [{"prompt": None, "expected": len(prompts), "rows": len(results), "count": True}], worst
    for i, (prompt, result) in enumerate(zip(prompts, results)):
        ids = [int(t) for t in result["input_ids"]]
        ids_of = i if ids == prompt else next((j for j, p in enumerate(prompts) if p == ids), -1)
        bad_layer = None
        for lid, h in zip(layers, result["hidden_states"]):
            ref = refs[i][lid]
            if tuple(h.shape) != tuple(ref.shape):
                bad_layer = lid
                break
            diff = relative(h, ref)
            worst = max(worst, diff)
            if diff > tolerance:
                bad_layer = lid
                break
        if ids_of == i and bad_layer is None and len(result["hidden_states"]) == len(layers):
            continue
        lid = layers[0] if bad_layer is None else bad_layer
        k = list(layers).index(lid)
        states = result["hidden_states"][k] if k < len(result["hidden_states"]) else None
        problems.append({
            "prompt": i, "expected": len(prompt), "layer": lid,
            "rows": None if states is None else int(states.shape[0]),
            "input_ids_of": ids_of,
            "segments": [] if states is None or not attribute else segments(states, [r[lid] for r in refs]),
        })
    return problems, worst

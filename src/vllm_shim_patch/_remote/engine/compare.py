"""Each returned sequence against transformers' forward of its own prompt alone.

The engine computes in bfloat16: over 2,000 tokens its rows drift from a float32 forward by up to
about 0.2 of the states' scale, far beyond the rehearsal's 1e-3 (`rehearse/check.py`), but a row
of another prompt, or of another position, is farther still. So each captured row is attributed
to the reference row it is nearest to, among every row of every prompt of the call, and a sequence
is right where its rows are its own prompt's rows in order. The problems have the rehearsal's shape
(`check.call_problems`), so the tool words them as it words the rehearsal's.
"""

from __future__ import annotations

from typing import Any


def segments(rows: Any, refs: list[Any]) -> list[tuple[int, int, int]]:
    """Runs of captured rows attributed to (prompt, first row, count), each row by its nearest."""
    import torch

    if rows.shape[0] == 0:
        return []
    # float64: cdist's batched route loses the last digits in float32.
    table = torch.cat(refs, dim=0).double()
    starts = [0]
    for r in refs:
        starts.append(starts[-1] + r.shape[0])
    out: list[list[int]] = []
    for lo in range(0, rows.shape[0], 512):
        for best in torch.cdist(rows[lo:lo + 512].double(), table).argmin(dim=1).tolist():
            j = max(i for i in range(len(refs)) if starts[i] <= best)
            r = best - starts[j]
            if out and out[-1][0] == j and out[-1][1] + out[-1][2] == r:
                out[-1][2] += 1
            else:
                out.append([j, r, 1])
    return [(j, r, n) for j, r, n in out]


def layer_of(rows: Any, refs: dict[int, Any], lid: int) -> int:
    """The layer whose reference rows (this prompt's, position by position) most of `rows` are
    nearer to than to layer `lid`'s, by half the distance at least; `lid` where there is none.
    Nearest-row attribution is blind to a capture of the wrong layer (each row is still nearest
    its own prompt's row at its position); the engine's bfloat16 drift is a fraction of the
    distance between two layers (0.24 of the states' scale at most over 2,000 tokens, adjacent
    layers 0.5 to 1.8 apart here)."""
    own = (rows.double() - refs[lid].double()).norm(dim=-1)
    best, most = lid, len(rows) // 2
    for other, ref in refs.items():
        if other == lid or tuple(ref.shape) != tuple(rows.shape):
            continue
        nearer = int(((rows.double() - ref.double()).norm(dim=-1) < 0.5 * own).sum())
        if nearer > most:
            best, most = other, nearer
    return best


def relative(a: Any, b: Any) -> float:
    scale = float(b.abs().max()) or 1.0
    return float((a.double() - b.double()).abs().max()) / scale


def call_problems(prompts: list[list[int]], results: list[dict[str, Any]], layers: tuple[int, ...],
                  refs: list[dict[int, Any]]) -> tuple[list[dict[str, Any]], float]:
    """(one entry per wrong sequence, as `check.call_problems` writes it; the largest relative
    difference of a right sequence's rows from its reference: the engine's bfloat16 drift)."""
    if len(results) != len(prompts):
        return [{"prompt": None, "expected": len(prompts), "rows": len(results), "count": True}], 0.0
    problems: list[dict[str, Any]] = []
    worst = 0.0
    for i, (prompt, result) in enumerate(zip(prompts, results)):
        ids = [int(t) for t in result.get("input_ids", [])]
        ids_of = i if ids == prompt else next((j for j, p in enumerate(prompts) if p == ids), -1)
        states = list(result.get("hidden_states") or [])
        bad: tuple[int, Any, list[tuple[int, int, int]]] | None = None
        layer_found: int | None = None
        for k, lid in enumerate(layers):
            if k >= len(states):
                bad = (lid, None, [])
                break
            segs = segments(states[k], [r[lid] for r in refs])
            if segs != [(i, 0, len(prompt))]:
                bad = (lid, states[k], segs)
                break
            other = layer_of(states[k], refs[i], lid)
            if other != lid:
                bad = (lid, states[k], segs)
                layer_found = other
                break
            worst = max(worst, relative(states[k], refs[i][lid]))
        if ids_of == i and bad is None:
            continue
        lid, h, segs = bad if bad is not None else (layers[0], states[0] if states else None,
                                                    [(i, 0, len(prompt))])
        problem = {"prompt": i, "expected": len(prompt), "layer": lid,
                   "rows": None if h is None else int(h.shape[0]), "input_ids_of": ids_of,
                   "segments": [list(s) for s in segs]}
        if layer_found is not None:
            problem["layer_of"] = layer_found
        problems.append(problem)
    return problems, worst

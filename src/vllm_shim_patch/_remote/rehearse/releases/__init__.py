"""The vLLM release adapters: which stand-ins and seams fit the installed vLLM.

One module (or package) per range of releases whose internals agree, each a
`protocols.ReleaseAdapter`: NAME, MULTI_RANK (a world of many ranks, or of one), REAL, STOOD_IN,
`fits()` (what the installed vLLM defines, never its version string: None when it fits, else the
member that is missing), `build(on_forward)` (the stand-ins, changing nothing of vLLM),
`self_check(run, standins)`, `install(standins)` and `restore(standins)` (which undoes everything
install did), and what the run reads: `workers`, `model_of`, `forward_of`, `worker_failure`,
`rank_failure`, `shutdown`; and `environment()`, the variables it needs set before vLLM is imported,
read from the installed files only. The first adapter that fits the installed vLLM and the world size is
used. Adding a release range: one module, one entry in ADAPTERS.
"""

from . import v1_multiproc, v1_tp, v2_multiproc

ADAPTERS = (v1_multiproc, v1_tp, v2_multiproc)


def environment():
    """The variables every adapter asks set before vLLM is imported (each reads the installed
    files only; an adapter that will not fit asks none)."""
    out = {}
    for adapter in ADAPTERS:
        out.update(adapter.environment())
    return out


def select(world_size=1):
    """(adapter, None) for the first adapter that fits a world of `world_size` ranks, else
    (None, why none fits)."""
    why = []
    for adapter in ADAPTERS:
        if adapter.MULTI_RANK != (world_size > 1):
            continue
        missing = adapter.fits()
        if missing is None:
            return adapter, None
        why.append(f"{adapter.NAME}: {missing}")
    return None, "no release adapter fits this vLLM (" + "; ".join(why) + ")"

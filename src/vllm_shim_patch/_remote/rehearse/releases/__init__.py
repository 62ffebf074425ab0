"""The vLLM release adapters: which stand-ins and seams fit the installed vLLM.

One module (or package) per range of releases whose internals agree, each a
`protocols.ReleaseAdapter`: NAME, REAL, STOOD_IN, `fits()` (what the installed vLLM defines,
never its version string: None when it fits, else the member that is missing), `build(on_forward)`
(the stand-ins, changing nothing of vLLM), `self_check(run, standins)`, `install(standins)` and
`restore(standins)` (which undoes everything install did), and what the run reads: `worker_of`,
`model_of`, `forward_of`, `worker_failure`, `shutdown`. The first adapter that fits is used.
Adding a release range: one module, one entry in ADAPTERS.
"""

from . import v1_multiproc

ADAPTERS = (v1_multiproc,)


def select():
    """(adapter, None) for the first adapter that fits, else (None, why none fits)."""
    why = []
    for adapter in ADAPTERS:
        missing = adapter.fits()
        if missing is None:
            return adapter, None
        why.append(f"{adapter.NAME}: {missing}")
    return None, "no release adapter fits this vLLM (" + "; ".join(why) + ")"

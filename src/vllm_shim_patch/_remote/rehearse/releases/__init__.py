"""The vLLM release adapters: which stand-ins and seams fit the installed vLLM.

One module per range of releases whose internals agree. Each defines NAME, REAL, STOOD_IN,
`fits()` (what the installed vLLM defines, never its version string: None when it fits, else
the member that is missing), `build(on_forward)`, `self_check(run, standins)`, `install(standins)` and
`restore(standins)` (which undoes everything install did). The first adapter that fits is used. Adding a release range: one module, one entry.
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

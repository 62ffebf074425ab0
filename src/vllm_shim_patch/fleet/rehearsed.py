"""The vLLM releases the rules were rehearsed on: the compatibility matrix's data
(`docs/compatibility.json`, which `bench/matrix.py` writes from real runs and makes
`docs/compatibility.md` from: every vLLM release installed, each speculators release patched,
rehearsed with the parity workload and rolled back). A test holds this table equal to the
matrix data's, so the tool knows what its own matrix showed without the repository at hand.

`wheel --all-series` builds one wheel per series here; the wheel of a series it could not rehearse
on the build machine says what this table records for it, and no more.
"""

from __future__ import annotations

from . import naming

ALL = ("0.3.0", "0.4.0", "0.4.0.1")
# (the vLLM release, the speculators releases whose apply and rehearsal both passed on it)
REHEARSED: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("0.12.0", ALL),
    ("0.13.0", ALL),
    ("0.14.1", ALL),
    ("0.15.1", ALL),
    ("0.16.0", ALL),
    ("0.17.1", ALL),
    ("0.18.1", ALL),
    ("0.19.1", ALL),
    ("0.20.2", ALL),
    ("0.21.0", ALL),
    ("0.22.1", ALL),
    ("0.23.0", ALL),
    ("0.24.0", ALL),
    ("0.25.1", ALL),
    ("0.26.0", ALL),
    ("0.27.1", ALL),
    ("0.28.0", ALL),
    ("0.29.0", ALL),
    ("0.30.0", ALL),
    ("0.31.0", ALL),
    ("0.32.0", ALL),
    ("0.33.0", ALL),
    ("0.34.0", ALL),
)


def newer_than_rehearsed(version: str) -> str | None:
    """The newest release the matrix rehearsed when `version`'s series is beyond it, else None.

    By series: a patch release or nightly of a rehearsed series is what that series' rules were
    written for; a new series is where vLLM moves its internals (0.34 removed Model Runner V1)."""
    from packaging.version import InvalidVersion, Version

    newest = [release for release, passed in REHEARSED if passed][-1]
    try:
        beyond = Version(naming.major_minor(version)) > Version(naming.major_minor(newest))
    except (InvalidVersion, ValueError):
        return None
    return newest if beyond else None


def releases(package_release: str) -> list[str]:
    """The vLLM releases the matrix rehearsed `package_release` on, oldest first."""
    return [release for release, passed in REHEARSED if package_release in passed]


def record(package_release: str, vllm_release: str) -> str:
    """What the matrix records of `package_release` on `vllm_release`, in words ("" if nothing)."""
    for release, passed in REHEARSED:
        if release == vllm_release:
            if package_release in passed:
                return (f"the compatibility matrix of this vllm-shim-patch (docs/compatibility.md) records "
                        f"speculators {package_release} on vLLM {release}: apply and rehearsal (the parity "
                        f"workload) passed, rollback RECORD-exact")
            return (f"the compatibility matrix of this vllm-shim-patch (docs/compatibility.md) records no "
                    f"passing rehearsal of speculators {package_release} on vLLM {release}")
    return ""


def series_of(release: str) -> str:
    return naming.major_minor(release)

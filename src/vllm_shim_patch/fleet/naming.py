"""The names a patched wheel carries, from the release it patches and the vLLM series it is for.

A series is what `--vllm-version` names and `versions.in_series` means: a release prefix of at
least major.minor. `0.16` holds 0.16.0, 0.16.1, the release candidates 0.16.0rc1 and the nightlies
0.16.1.dev45+g1a2b3c4.cu129; `0.16.0` holds 0.16.0 and its own pre, post, dev and local builds.
PEP 440's prefix match says exactly that (`vllm==0.16.*`), where `>=0.16,<0.17` would refuse
0.16.0rc1, so the wheel's `vllm` requirement is the prefix match.
"""

from __future__ import annotations

import re

from packaging.version import InvalidVersion, Version

from ..errors import UsageError

# The local version label's first part: `0.3.0+vsp.vllm0.16` is this tool's build of 0.3.0.
LOCAL_PREFIX = "vsp"
# A wheel of another rule selection than the full one (`--skip`/`--only`, opt-in options) says so
# in its version, so it never shares the full-rules wheel's name (nor replaces it in a folder, nor
# is taken for it by pip): `.skip.<digest>` of the rules left out, `.opt.<digest>` of the options.
_SERIES_LABEL = re.compile(rf"^{LOCAL_PREFIX}\.vllm(\d+(?:\.\d+)+)(?:\.skip\.[0-9a-z]+)?(?:\.opt\.[0-9a-z]+)?$")


def series_of(version: str | Version, what: str = "--vllm-version") -> str:
    """The series `version` names: its release segment (`0.16`, `0.16.0`; `0.17.0.dev3` is `0.17.0`).

    At least major.minor: `0` would claim every vLLM 0.x release for one patch."""
    try:
        parsed = version if isinstance(version, Version) else Version(version)
    except InvalidVersion:
        raise UsageError(f"{what} {version!r} is not a version like 0.16 or 0.16.0") from None
    if len(parsed.release) < 2:
        raise UsageError(f"{what} {version}: a patched wheel is for one vLLM series, at least major.minor "
                         f"(e.g. 0.16); {version} would claim every vLLM {version}.x release")
    return ".".join(str(n) for n in parsed.release)


def major_minor(version: str) -> str:
    """The vLLM release line `version` belongs to (0.16.0 -> 0.16): the default series."""
    return ".".join(str(n) for n in Version(version).release[:2])


def local_version(version: str, series: str, skipped: tuple[str, ...] = (), options: tuple[str, ...] = ()) -> str:
    """`0.3.0` for series `0.16` -> `0.3.0+vsp.vllm0.16` (PEP 440 normalized); with rules left out
    (`skipped`) or opt-in `options`, `0.3.0+vsp.vllm0.16.skip.h1f0c2a9e.opt.h77b1d3c0`: a digest of
    each, so two selections never share a name."""
    parsed = Version(version)
    if parsed.local is not None:
        raise UsageError(f"{version} already carries a local version label (+{parsed.local}): a patched "
                         f"wheel is built from the release as published, not from another build of it")
    label = f"{LOCAL_PREFIX}.vllm{series}"
    for word, names in (("skip", skipped), ("opt", options)):
        if names:
            label += f".{word}.{_digest(names)}"
    return str(Version(f"{parsed.public}+{label}"))


def _digest(names: tuple[str, ...]) -> str:
    """8 hex digits of the sorted names after an `h`: a segment of digits alone would be read as a
    number by PEP 440 (its leading zeros dropped)."""
    import hashlib

    return "h" + hashlib.sha256(",".join(sorted(set(names))).encode()).hexdigest()[:8]


def parse_local(version: str) -> tuple[str, str] | None:
    """(the release, the series) of a version this tool wrote (`0.3.0+vsp.vllm0.16`), else None."""
    try:
        parsed = Version(version)
    except InvalidVersion:
        return None
    match = _SERIES_LABEL.match(parsed.local or "")
    return (parsed.public, match.group(1)) if match else None


def distribution_part(name: str) -> str:
    """A distribution name as wheel file and dist-info names spell it (`Foo.Bar-x` -> `foo_bar_x`)."""
    return re.sub(r"[-_.]+", "_", name).lower()


def dist_info_name(name: str, version: str) -> str:
    return f"{distribution_part(name)}-{version}.dist-info"


def wheel_file_name(name: str, version: str, tags: list[str]) -> str:
    """`speculators-0.3.0+vsp.vllm0.16-py3-none-any.whl`; `tags` the WHEEL file's `Tag:` values."""
    parts = [t.split("-") for t in tags]
    if not parts or any(len(p) != 3 for p in parts):
        raise UsageError(f"the original wheel's WHEEL file has no usable Tag (found {tags!r})")
    python, abi, platform = (".".join(dict.fromkeys(p[i] for p in parts)) for i in range(3))
    return f"{distribution_part(name)}-{version}-{python}-{abi}-{platform}.whl"


def vllm_requirement(series: str) -> str:
    """The requirement that holds exactly the vLLM releases `series` names."""
    return f"vllm=={series}.*"

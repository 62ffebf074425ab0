"""The names a patched wheel carries: series, local version, file and dist-info names, the vllm
requirement, which must hold exactly the releases `versions.in_series` puts in the series."""

from __future__ import annotations

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from vllm_shim_patch.errors import UsageError
from vllm_shim_patch.fleet import naming
from vllm_shim_patch.versions import in_series


@pytest.mark.parametrize(("given", "series"), [
    ("0.16", "0.16"), ("0.16.0", "0.16.0"), ("0.17.0.dev12+g1a2b3c4", "0.17.0"), ("1.2.3.4", "1.2.3.4"),
], ids=["minor", "release", "nightly", "long"])
def test_series_is_the_release_segment(given: str, series: str) -> None:
    assert naming.series_of(given) == series


def test_a_series_is_at_least_major_minor() -> None:
    with pytest.raises(UsageError, match=r"^--vllm-version 0: a patched wheel is for one vLLM series, at least "
                                         r"major.minor \(e.g. 0.16\); 0 would claim every vLLM 0.x release$"):
        naming.series_of("0")
    with pytest.raises(UsageError, match=r"^--vllm-version 'x' is not a version like 0.16 or 0.16.0$"):
        naming.series_of("x")


def test_local_version_and_names() -> None:
    version = naming.local_version("0.3.0", "0.16")
    assert version == "0.3.0+vsp.vllm0.16"
    assert naming.parse_local(version) == ("0.3.0", "0.16")
    assert naming.parse_local("0.3.0") is None
    assert naming.parse_local("0.3.0+cu121") is None
    assert naming.dist_info_name("speculators", version) == "speculators-0.3.0+vsp.vllm0.16.dist-info"
    assert naming.wheel_file_name("speculators", version, ["py3-none-any"]) == \
        "speculators-0.3.0+vsp.vllm0.16-py3-none-any.whl"
    assert naming.wheel_file_name("My.Pkg", "1.0", ["py2-none-any", "py3-none-any"]) == "my_pkg-1.0-py2.py3-none-any.whl"
    assert naming.major_minor("0.16.0") == "0.16"


def test_a_build_of_a_build_is_refused() -> None:
    with pytest.raises(UsageError, match=r"^0.3.0\+vsp.vllm0.16 already carries a local version label"):
        naming.local_version("0.3.0+vsp.vllm0.16", "0.17")


def test_local_versions_sort_above_the_release_and_by_series() -> None:
    # Why `pip install speculators==0.3.0` takes the patched build from a wheelhouse (measured with
    # pip and uv in the README): == matches local versions, and the highest wins.
    assert Version("0.3.0+vsp.vllm0.16") in SpecifierSet("==0.3.0")
    assert Version("0.3.0+vsp.vllm0.16") not in SpecifierSet("===0.3.0")
    assert Version("0.3.0") < Version("0.3.0+vsp.vllm0.9") < Version("0.3.0+vsp.vllm0.16") < Version("0.3.0+vsp.vllm0.17")


@pytest.mark.parametrize("series", ["0.16", "0.16.0"])
@pytest.mark.parametrize("installed", ["0.16.0", "0.16.1", "0.16.0rc1", "0.16.1.dev45+g1a2b3c4.cu129", "0.16.0+cu129",
                                       "0.16.0.post1", "0.15.1", "0.17.0", "0.17.0.dev3", "0.160.0", "1.16.0"])
def test_the_requirement_holds_exactly_the_series(series: str, installed: str) -> None:
    spec = SpecifierSet(naming.vllm_requirement(series).removeprefix("vllm"))
    assert spec.contains(Version(installed), prereleases=True) == in_series(Version(installed), Version(series))


def test_the_rehearsal_knows_a_patched_build_of_a_supported_release() -> None:
    from vllm_shim_patch.analysis.rehearse import SUPPORTED, released, request

    assert released("0.3.0+vsp.vllm0.16") == "0.3.0" and released("0.3.0+cu121") == "0.3.0+cu121"
    assert request(installed="0.3.0+vsp.vllm0.16").supported == (*SUPPORTED, "0.3.0+vsp.vllm0.16")
    assert request(installed="0.2.0+vsp.vllm0.16").supported == SUPPORTED
    assert request(installed="0.3.0").supported == SUPPORTED


@pytest.mark.parametrize(("recorded", "now", "same"), [
    ("0.16", "0.16", True), ("0.16.0", "0.16", True), ("0.16", "0.16.0", True), ("0.16", "0.17", False),
    ("0.16.0", "0.16.1", False), ("", "0.16", False)])
def test_a_patch_is_reused_only_within_its_series(recorded: str, now: str, same: bool) -> None:
    from vllm_shim_patch.commands.patched_wheel import same_series

    assert same_series(recorded, Version(now)) is same


def test_a_wheel_of_another_rule_selection_has_another_name() -> None:
    """Issue 40, item 10: a wheel built with --skip (or an opt-in option) is never named as the
    full-rules wheel, so it cannot replace it in a folder nor be installed for it."""
    import hashlib

    def h(*names: str) -> str:
        return "h" + hashlib.sha256(",".join(sorted(names)).encode()).hexdigest()[:8]

    full = naming.local_version("0.3.0", "0.16")
    skip = naming.local_version("0.3.0", "0.16", skipped=("worker-no-eagle3-gate",))
    both = naming.local_version("0.3.0", "0.16", skipped=("b", "a"), options=("trust-remote-code",))
    assert skip == f"0.3.0+vsp.vllm0.16.skip.{h('worker-no-eagle3-gate')}"
    assert both == f"0.3.0+vsp.vllm0.16.skip.{h('a', 'b')}.opt.{h('trust-remote-code')}"
    assert len({full, skip, both, naming.local_version("0.3.0", "0.16", skipped=("a",))}) == 4
    assert naming.wheel_file_name("speculators", skip, ["py3-none-any"]) != naming.wheel_file_name(
        "speculators", full, ["py3-none-any"])
    assert naming.parse_local(skip) == naming.parse_local(both) == ("0.3.0", "0.16")

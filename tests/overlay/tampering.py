"""Helpers shared by the tests that tamper with the overlay: the overlay folder, git on it, one-line errors."""

from __future__ import annotations

import hashlib
import os
import subprocess
import zlib
from pathlib import Path

from conftest import Sandbox

from vllm_shim_patch.overlay.integrity import recovery


def overlay_of(sb: Sandbox) -> Path:
    return next(sb.state.glob("speculators-*"))


def git(gitdir: Path, *args: str, env: dict[str, str] | None = None, stdin: bytes | None = None) -> str:
    full = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    out = subprocess.run(["git", "--git-dir", str(gitdir), *args], input=stdin, capture_output=True,
                         env={**full, **(env or {})}, check=True).stdout
    return out.decode().strip()


def error(message: str) -> str:
    """stderr of a refused run: the one line the CLI prints."""
    return f"patch-speculators: error: {message}\n"


def damaged(overlay: Path, what: str, version: str = "0.3.0") -> str:
    return error(f"{what}; {recovery(overlay, 'speculators', version)}")


def write_object(gitdir: Path, kind: str, body: bytes) -> str:
    """A loose object written by hand (git itself refuses to make the hostile ones)."""
    data = f"{kind} {len(body)}\0".encode() + body
    sha = hashlib.sha1(data).hexdigest()
    path = gitdir / "objects" / sha[:2] / sha[2:]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(zlib.compress(data))
    return sha


def tree_entry(mode: str, name: str, sha: str) -> bytes:
    return f"{mode} {name}\0".encode() + bytes.fromhex(sha)


def commit_object(gitdir: Path, tree: str, parent: str) -> str:
    body = (f"tree {tree}\nparent {parent}\nauthor a <a@b> 0 +0000\ncommitter a <a@b> 0 +0000\n\nplanted\n").encode()
    return write_object(gitdir, "commit", body)

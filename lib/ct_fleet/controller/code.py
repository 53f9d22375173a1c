"""What code the workers run: a pinned SHA and its git archive.

The SHA is HEAD when the worktree is clean, else the tree SHA of the worktree with its
tracked changes (computed in a throwaway index, so the user's index is untouched). The
tarball is `git archive` of that commit or tree, so workers see exactly what git tracks.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import BadInput
from ..protocol import extra_src_key
from . import extra_src


def _git(repo: Path, *args: str, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(["git", *args], cwd=repo, env=env, check=False, capture_output=True, text=True)
    if proc.returncode != 0:
        raise BadInput(f"git {' '.join(args)} failed in {repo}: {proc.stderr.strip()}")
    return proc.stdout.strip()


@dataclass(frozen=True)
class CodeVersion:
    sha: str
    dirty: bool
    untracked: int


def code_version(repo: Path) -> CodeVersion:
    status = _git(repo, "status", "--porcelain", "--untracked-files=all")
    lines = [line for line in status.splitlines() if line]
    untracked = sum(1 for line in lines if line.startswith("??"))
    dirty = any(not line.startswith("??") for line in lines)
    has_head = (
        subprocess.run(["git", "rev-parse", "--verify", "-q", "HEAD"], cwd=repo, capture_output=True).returncode == 0
    )
    if has_head and not dirty:
        return CodeVersion(_git(repo, "rev-parse", "HEAD"), False, untracked)
    with tempfile.TemporaryDirectory() as tmp:
        index = Path(tmp) / "index"
        real_index = Path(_git(repo, "rev-parse", "--git-path", "index"))
        real_index = real_index if real_index.is_absolute() else repo / real_index
        if real_index.exists():
            shutil.copy(real_index, index)
        env = {**os.environ, "GIT_INDEX_FILE": str(index)}
        _git(repo, "add", "-u", env=env)
        tree = _git(repo, "write-tree", env=env)
    return CodeVersion(tree, True, untracked)


def archive(repo: Path, sha: str, dest: Path) -> Path:
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest, "wb") as fh:
        proc = subprocess.run(["git", "archive", "--format=tar.gz", sha], cwd=repo, stdout=fh, stderr=subprocess.PIPE)
    if proc.returncode != 0:
        raise BadInput(f"git archive {sha} failed: {proc.stderr.decode().strip()}")
    return dest


def pack_extra_src(src: Path, dest: Path) -> Path:
    """Tar DIR as <basename>/..., shipping what extra_src.scan_tree lists (no caches, no credentials)."""
    tree = extra_src.scan_tree(src)
    with tarfile.open(dest, "w:gz") as tar:
        for rel in tree.files:
            tar.add(tree.root / rel, arcname=str(Path(tree.name) / rel), recursive=False)
    return dest


def upload_extra_src(s3: Any, bucket: str, src: Path, tarball: Path) -> str:
    """Pack and upload one --extra-src tree under artifacts/extra-<basename>-<digest>.tar.gz."""
    pack_extra_src(src, tarball)
    digest = hashlib.sha256(tarball.read_bytes()).hexdigest()[:16]
    key = extra_src_key(src.name, digest)
    s3.upload_file(str(tarball), bucket, key)
    return key

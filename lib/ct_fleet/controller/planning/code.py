"""What code the workers run: a pinned SHA and its git archive.

The SHA is HEAD when the worktree is clean, else the tree SHA of the worktree with its
tracked changes (computed in a throwaway index, so the user's index is untouched). The
tarball is `git archive` of that commit or tree, so workers see exactly what git tracks.
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import hashlib
import os
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...environment import inherited
from ...errors import BadInput
from ...protocol import extra_src_key
from ...protocol.keys import wheel_key
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
        env = inherited({"GIT_INDEX_FILE": str(index)})
        _git(repo, "add", "-u", env=env)
        tree = _git(repo, "write-tree", env=env)
    return CodeVersion(tree, True, untracked)


def archive(repo: Path, sha: str, dest: Path) -> Path:
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest, "wb") as fh:
        proc = subprocess.run(["git", "archive", "--format=tar.gz", sha], cwd=repo, stdout=fh, stderr=subprocess.PIPE)
    if proc.returncode != 0:
        dest.unlink(missing_ok=True)
        said = proc.stderr.decode(errors="replace").strip()
        if os.strerror(errno.ENOSPC) in said:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(dest))  # said as a full disk, not git's
        raise BadInput(f"git archive {sha} failed: {said}")
    return dest


def cached_archive(repo: Path, sha: str, dest: Path, cache: Path | None) -> tuple[Path, bool]:
    """`archive`, through this machine's artifact cache (paths.code_artifacts_dir, which local
    instances read too): the SHA names the content, so a cached copy is linked to `dest`
    rather than archived again, and a fresh archive is kept there for the next fleet.
    Returns the tarball and whether it came from the cache."""
    entry = cache / f"{sha}.tar.gz" if cache else None
    if entry is not None and _link_or_copy(entry, dest):
        with contextlib.suppress(OSError):
            os.utime(entry)  # most recently used: the last copy the workers' sweep drops
        return dest, True
    archive(repo, sha, dest)
    if entry is not None:
        with contextlib.suppress(OSError):  # a cache that cannot be written only costs time
            entry.parent.mkdir(parents=True, exist_ok=True)
            tmp = entry.with_name(f".{entry.name}.{os.getpid()}")
            if _link_or_copy(dest, tmp):
                os.replace(tmp, entry)  # whole or not at all, for another controller reading it
    return dest, False


def evict(cache: Path | None, sha: str) -> None:
    """Drop the cached copy of `sha` (one that did not unpack)."""
    if cache is not None:
        (cache / f"{sha}.tar.gz").unlink(missing_ok=True)


def _link_or_copy(src: Path, dest: Path) -> bool:
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.unlink(missing_ok=True)
    try:
        os.link(src, dest)
    except FileNotFoundError:
        return False
    except OSError:  # another file system, or links refused: a copy
        try:
            shutil.copyfile(src, dest)
        except FileNotFoundError:
            return False
    return True


def _reproducible(info: tarfile.TarInfo) -> tarfile.TarInfo:
    """Same content, same bytes: the tarball's digest is the tree's content digest."""
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mode = 0o755 if info.mode & 0o111 else 0o644
    return info


def pack_extra_src(src: Path, dest: Path) -> str:
    """Tar DIR as <basename>/..., shipping what extra_src.scan_tree lists (no caches, no
    credentials); returns the digest of the tarball, which depends on the tree's content only."""
    return pack_tree(extra_src.scan_tree(src), dest)


def pack_tree(tree: extra_src.ExtraTree, dest: Path) -> str:
    """Tar a scanned tree as <basename>/...; the tarball's digest (content only)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz:
        with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for rel in sorted(tree.files, key=str):
                tar.add(tree.root / rel, arcname=str(Path(tree.name) / rel), recursive=False, filter=_reproducible)
    return hashlib.sha256(dest.read_bytes()).hexdigest()[:16]


def upload_extra_src(s3: Any, bucket: str, name: str, tarball: Path, digest: str) -> str:
    """Upload one packed --extra-src tree under artifacts/extra-<basename>-<digest>.tar.gz."""
    key = extra_src_key(name, digest)
    s3.upload_file(str(tarball), bucket, key)
    return key


def upload_wheel(s3: Any, bucket: str, wheel: Path) -> str:
    """Ship a local wheel named in setting_requirements: artifacts/wheels/<digest>/<file>."""
    key = wheel_key(hashlib.sha256(wheel.read_bytes()).hexdigest()[:16], wheel.name)
    s3.upload_file(str(wheel), bucket, key)
    return key


def revision(repo: Path, version: CodeVersion) -> dict[str, Any]:
    """The shipped code's git revision, as Inspect records one (EvalRevision) in a log header.

    Workers run a git archive, which has no .git, so the merge writes this instead. A dirty
    worktree ships a tree SHA; the revision then names HEAD and says dirty, like Inspect.
    """
    head = subprocess.run(["git", "rev-parse", "--verify", "-q", "HEAD"], cwd=repo, capture_output=True, text=True)
    origin = subprocess.run(["git", "remote", "get-url", "origin"], cwd=repo, capture_output=True, text=True)
    commit = head.stdout.strip() if head.returncode == 0 else version.sha
    return {"type": "git", "origin": public_origin(origin.stdout.strip()), "commit": commit, "dirty": version.dirty}


def tree_revision(tree: Path) -> dict[str, Any] | None:
    """The git revision of a task's own tree (an --extra-src root), as `inspect eval` run
    there would record it: None unless the tree is in a git repo with an origin."""

    def git(*args: str) -> str | None:
        proc = subprocess.run(["git", "-C", str(tree), *args], capture_output=True, text=True)
        return proc.stdout.strip() if proc.returncode == 0 else None

    origin, commit = git("remote", "get-url", "origin"), git("rev-parse", "--verify", "-q", "HEAD")
    if not origin or not commit:
        return None
    status = git("status", "--porcelain", "--untracked-files=no", ".")
    return {"type": "git", "origin": public_origin(origin), "commit": commit, "dirty": bool(status)}


def public_origin(url: str) -> str:
    """The origin as a log may show it: no credentials, and no path of this machine (a
    clone of a local directory records "")."""
    url = _without_credentials(url)
    scheme, sep, _ = url.partition("://")
    if sep:
        return "" if scheme == "file" else url
    host, colon, _ = url.partition(":")  # scp-like: git@github.com:org/repo.git
    return url if colon and "/" not in host and host else ""


def _without_credentials(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    if sep and "@" in rest.split("/", 1)[0]:
        return f"{scheme}://{rest.split('@', 1)[1]}"
    return url

"""What of an --extra-src tree ships to workers, and the limits on it.

A tree is packed as <basename>/..., uploaded to S3 and unpacked on every worker, so:
- caches, VCS data, environments, build output and lockfiles are left out (they are
  rebuilt or irrelevant on a worker);
- credential files (.env, .aws/, .ssh/, *.pem, id_* keys, ...) are never shipped: they
  would land in S3 and on every worker; they are left out and the user is told;
- the basename reaches shell word lists and PYTHONPATH on the worker, so it is limited to
  a safe alphabet;
- the size and file count are capped, so that `--extra-src ~` fails fast with a message
  instead of uploading a home directory.

`scan_tree` decides once; the packer ships exactly what it lists.
"""

from __future__ import annotations

import fnmatch
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

from ...errors import BadInput

MAX_FILES = 20_000
MAX_BYTES = 256 << 20

SAFE_BASENAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,99}")

EXCLUDED_DIRS = {"__pycache__", ".git", "node_modules", ".venv", "venv", "build", "dist"}
LOCKFILE_NAMES = {"package-lock.json", "yarn.lock", "pnpm-lock.yaml", "poetry.lock", "uv.lock", "Pipfile.lock"}
CREDENTIAL_DIRS = {".aws", ".ssh", ".gnupg", ".docker"}
CREDENTIAL_FILES = (
    ".env",
    ".env.*",
    "*.env",
    "*.pem",
    "*.key",
    "*.p12",
    "*.pfx",
    "id_*",
    ".netrc",
    ".pypirc",
    ".npmrc",
    ".git-credentials",
    "credentials",
)


def is_credential(name: str) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in CREDENTIAL_FILES)


def _left_out(name: str) -> bool:
    return name in EXCLUDED_DIRS or name in LOCKFILE_NAMES or name.endswith((".lock", ".pyc", ".pyo"))


@dataclass
class ExtraTree:
    root: Path
    files: list[Path] = field(default_factory=list)  # relative to root, in packing order
    credentials: list[str] = field(default_factory=list)  # relative paths left out as credentials
    size: int = 0

    @property
    def name(self) -> str:
        return self.root.name

    def note(self) -> str | None:
        if not self.credentials:
            return None
        shown = ", ".join(self.credentials[:5]) + (
            f" and {len(self.credentials) - 5} more" if len(self.credentials) > 5 else ""
        )
        return f"--extra-src {self.root}: credential files are never shipped, left out: {shown}"


def scan_tree(root: Path) -> ExtraTree:
    """The files of the tree that ship; BadInput when the tree cannot ship."""
    root = root.expanduser().resolve()
    if root == Path(root.anchor):
        raise BadInput("--extra-src /: ship a project directory, not the file system root")
    if not root.is_dir():
        raise BadInput(f"--extra-src {root}: not a directory")
    if not SAFE_BASENAME.fullmatch(root.name):
        raise BadInput(
            f"--extra-src {root}: the directory name {root.name!r} must be letters, digits and ._- "
            "(it becomes a path on every worker); rename it or ship it through a symlink with such a name"
        )
    tree = ExtraTree(root)
    for dirpath, dirs, files in os.walk(root, onerror=_unreadable):
        here = Path(dirpath)
        kept_dirs = []
        for d in sorted(dirs):
            if d in CREDENTIAL_DIRS:
                tree.credentials.append(str((here / d).relative_to(root)) + "/")
            elif not _left_out(d):
                kept_dirs.append(d)
        dirs[:] = kept_dirs
        for name in sorted(files):
            path = here / name
            rel = path.relative_to(root)
            if _left_out(name):
                continue
            if is_credential(name):
                tree.credentials.append(str(rel))
                continue
            try:
                info = path.lstat()
            except OSError as exc:
                raise BadInput(f"--extra-src {root}: cannot read {rel} ({exc.strerror})") from None
            if not (stat.S_ISREG(info.st_mode) or stat.S_ISLNK(info.st_mode)):
                continue  # sockets, fifos and devices do not travel
            if stat.S_ISLNK(info.st_mode):
                target = os.readlink(path)
                if os.path.isabs(target) or not (path.parent / target).resolve().is_relative_to(root):
                    raise BadInput(
                        f"--extra-src {root}: {rel} links to {target}, outside the tree (it would not "
                        "exist on a worker); copy the file into the tree instead"
                    )
            tree.files.append(rel)
            tree.size += info.st_size
            if len(tree.files) > MAX_FILES:
                raise BadInput(
                    f"--extra-src {root}: more than {MAX_FILES:,} files to ship (caches, .git and venvs already "
                    "left out); ship the project directory, not a parent of it"
                )
            if tree.size > MAX_BYTES:
                raise BadInput(
                    f"--extra-src {root}: more than {MAX_BYTES >> 20} MiB to ship; leave data sets and "
                    "build output out of the tree (workers fetch data themselves)"
                )
    return tree


def _unreadable(exc: OSError) -> None:
    raise BadInput(f"--extra-src: cannot read {exc.filename} ({exc.strerror})")

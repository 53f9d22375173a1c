"""What of an --extra-src tree ships to workers, and the limits on it.

A tree is packed as <basename>/..., uploaded to S3 and unpacked on every worker, so:
- caches, VCS data, environments, build output and lockfiles are left out (they are
  rebuilt or irrelevant on a worker);
- credential files are never shipped: they would land in S3 and on every worker. They are
  found by name (a maintained list, any letter case: .env, .envrc, .aws/, .ssh/, .kube/,
  gcloud and gh configs, *.pem, id_* keys, shell histories, ...) and by content (a private
  key, a cloud service account's JSON, AWS keys, .env-style KEY=value lines of a secret's
  name), which also finds a hard link or a copy under any name; they are left out and the
  user is told, for every tree that ships (a task's own directory too);
- a ct-fleet runs directory inside the tree is left out: earlier runs do not ship, and do
  not change the tree's digest (the fleet id);
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
# Lower case: names are compared in lower case (ID_RSA is id_rsa).
CREDENTIAL_DIRS = {".aws", ".ssh", ".gnupg", ".docker", ".kube", ".azure", "gcloud", "gh"}
CREDENTIAL_FILES = (
    ".env",
    ".env.*",
    "*.env",
    ".envrc",
    "*.pem",
    "*.key",
    "*.p12",
    "*.pfx",
    "*.jks",
    "*.keystore",
    "id_*",
    ".netrc",
    ".pypirc",
    ".npmrc",
    ".git-credentials",
    ".pgpass",
    ".my.cnf",
    "*_history",
    ".*_history",
    ".history",
    "credentials",
    "*_credentials",
    "*credentials.json",
    "*-key.json",
    "*_key.json",
    "*.tfstate",
    "kubeconfig",
)
# Content that is a credential whatever the file is called: read from each file's start.
CONTENT_SCAN = 64 << 10
_SECRET_CONTENT = re.compile(
    rb"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----"
    rb"|\"type\"\s*:\s*\"(?:service_account|authorized_user)\""
    rb"|aws_secret_access_key\s*="
    rb"|\"private_key\"\s*:"
)
# .env-style lines of a secret's name (not in source code, where such names are read, not set)
_ENV_LINE = re.compile(rb"^(?:export\s+)?[A-Z_][A-Z0-9_]*(?:KEY|TOKEN|SECRET|PASSWORD|PASSWD)[A-Z0-9_]*=\S", re.M)
_SOURCE_SUFFIXES = (".py", ".pyi", ".ipynb", ".md", ".rst", ".sh", ".bats", ".js", ".ts")


def is_credential(name: str) -> bool:
    lower = name.lower()
    return any(fnmatch.fnmatchcase(lower, pattern) for pattern in CREDENTIAL_FILES)


def holds_credential(path: Path) -> bool:
    """Does the file's start look like a credential (whatever its name)?"""
    try:
        with open(path, "rb") as fh:
            head = fh.read(CONTENT_SCAN)
    except OSError:
        return False
    if _SECRET_CONTENT.search(head):
        return True
    return not path.name.lower().endswith(_SOURCE_SUFFIXES) and bool(_ENV_LINE.search(head))


def is_runs_dir(path: Path) -> bool:
    """A ct-fleet runs directory: it holds fleets' run directories (a manifest beside a
    controller lock or a phases record: protocol/run_layout.py)."""
    try:
        children = [c for _, c in zip(range(200), path.iterdir(), strict=False)]
    except OSError:
        return False
    return any(
        (c / "manifest.json").is_file() and ((c / "controller.lock").exists() or (c / "phases.json").exists())
        for c in children
    )


def _left_out(name: str) -> bool:
    return name in EXCLUDED_DIRS or name in LOCKFILE_NAMES or name.endswith((".lock", ".pyc", ".pyo"))


@dataclass
class ExtraTree:
    root: Path
    files: list[Path] = field(default_factory=list)  # relative to root, in packing order
    credentials: list[str] = field(default_factory=list)  # relative paths left out as credentials
    runs: list[str] = field(default_factory=list)  # runs directories left out
    size: int = 0

    @property
    def name(self) -> str:
        return self.root.name

    def note(self) -> str | None:
        """What the tree leaves out that the user may have meant to ship, or None."""
        said = []
        if self.credentials:
            shown = ", ".join(self.credentials[:5]) + (
                f" and {len(self.credentials) - 5} more" if len(self.credentials) > 5 else ""
            )
            said.append(f"credential files are never shipped, left out: {shown}")
        if self.runs:
            said.append(f"runs directories left out: {', '.join(self.runs[:5])}")
        return f"{self.root}: {'; '.join(said)}" if said else None


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
            if d.lower() in CREDENTIAL_DIRS:
                tree.credentials.append(str((here / d).relative_to(root)) + "/")
            elif is_runs_dir(here / d):
                tree.runs.append(str((here / d).relative_to(root)) + "/")
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
            if stat.S_ISREG(info.st_mode) and holds_credential(path):
                tree.credentials.append(str(rel))
                continue
            if stat.S_ISLNK(info.st_mode):
                target = os.readlink(path)
                try:
                    resolved = (path.parent / target).resolve()
                except (RuntimeError, OSError):  # 3.11 raises RuntimeError for a loop
                    raise BadInput(
                        f"{root}: {rel} is a symlink loop (or a link that cannot be followed); remove it"
                    ) from None
                if os.path.isabs(target) or not resolved.is_relative_to(root):
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

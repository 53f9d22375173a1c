"""What the workers will run, unpacked here before anything is launched.

The code archive (`git archive` of the pinned SHA) and every --extra-src tree are packed
once, and the very tarballs that will be uploaded are unpacked into a scratch directory
laid out as on a worker. Preflight resolves policies, sandboxes, settings and task files
against that image rather than the working tree, so an untracked module or a file that
an exclusion rule leaves out is refused here instead of failing on every worker.
"""

from __future__ import annotations

import atexit
import gzip
import shutil
import tarfile
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...paths import REPO_ROOT
from ...tempdirs import owned_tempdir
from . import code
from .extra_src import scan_tree

if TYPE_CHECKING:
    from .jobs import FleetTask


@dataclass(frozen=True)
class ExtraTree:
    """One --extra-src tree: where it is here, its packed tarball and that tarball's digest."""

    source: Path
    tarball: Path
    digest: str

    @property
    def name(self) -> str:
        return self.source.name


@dataclass
class ShippedCode:
    sha: str
    code_tarball: Path
    image: Path  # the code root as a worker unpacks it
    extra_dir: Path  # the directory holding the unpacked --extra-src trees
    trees: list[ExtraTree] = field(default_factory=list)
    site: Path | None = None  # the fleet's requirements, installed beside the venv (overlay.py)
    notes: list[str] = field(default_factory=list)  # what each shipped tree left out, said to the user

    @classmethod
    def build(cls, repo: Path, sha: str, extra_src: Sequence[Path], cache: Path | None = None) -> ShippedCode:
        """Pack and unpack what ships; the code archive through this machine's artifact cache
        when one is given (code.cached_archive)."""
        work = owned_tempdir("shipped")  # a killed controller's is swept by the next one
        atexit.register(shutil.rmtree, work, True)
        image, extra_dir = work / "code", work / "extra"
        image.mkdir()
        extra_dir.mkdir()
        tarball, cached = code.cached_archive(repo, sha, work / "code.tar.gz", cache)
        try:
            _unpack(tarball, image)
        except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile):
            if not cached:
                raise
            # A cached copy that does not unpack (cut short by a full disk, or one the data
            # filter refuses: the cache is a directory the account may write) is replaced.
            code.evict(cache, sha)
            shutil.rmtree(image)
            image.mkdir()
            tarball, _ = code.cached_archive(repo, sha, tarball, cache)
            _unpack(tarball, image)
        trees, notes = [], []
        for source in extra_src:
            packed = work / f"extra-{source.name}.tar.gz"
            scanned = scan_tree(source)
            digest = code.pack_tree(scanned, packed)
            _unpack(packed, extra_dir)
            trees.append(ExtraTree(source, packed, digest))
            notes += [note] if (note := scanned.note()) else []
        return cls(sha, tarball, image, extra_dir, trees, notes=notes)

    @property
    def settings_dir(self) -> Path:
        return self.image / "examples" / "settings"

    @property
    def extra_roots(self) -> list[Path]:
        return [self.extra_dir / t.name for t in self.trees]

    @property
    def import_roots(self) -> list[Path]:
        """sys.path of a job on a worker (worker/run-worker.sh), in its order."""
        site = [self.site] if self.site else []
        return [self.image / "lib", self.settings_dir, *site, *self.extra_roots]

    def has_module(self, module: str) -> bool:
        rel = Path(*module.split("."))
        roots = [*self.import_roots, self.image]  # jobs run from the code root
        return any((r / rel).with_suffix(".py").is_file() or (r / rel / "__init__.py").is_file() for r in roots)

    def tree_of(self, path: Path) -> ExtraTree | None:
        """The --extra-src tree holding `path`, if any."""
        path = path.resolve()
        for tree in self.trees:
            if path.is_relative_to(tree.source.resolve()):
                return tree
        return None

    def revision_of(self, tasks: Sequence[FleetTask], version: code.CodeVersion) -> dict[str, Any] | None:
        """The git revision the merged logs record, as Inspect does for the code a task came
        from: a task of its own tree gets that tree's repo (or none), a task of this checkout
        or a setting the shipped commit, a registry task none. One per fleet: tasks that
        differ get none rather than a wrong one."""
        trees = {tree.name: tree.source for tree in self.trees}

        def of(task: FleetTask) -> dict[str, Any] | None:
            if task.task_root in ("code", "setting"):
                return code.revision(REPO_ROOT, version)
            tree = trees.get(task.task_spec.split("/", 1)[0]) if task.task_root == "extra" else None
            return code.tree_revision(tree) if tree else None

        found = [of(task) for task in tasks]
        return found[0] if found and all(r == found[0] for r in found) else None


def _unpack(tarball: Path, dest: Path) -> None:
    with tarfile.open(tarball) as tar:
        tar.extractall(dest, filter="data")

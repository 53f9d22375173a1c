"""Scratch directories named for the process that owns them, and swept once it is dead.

A controller killed with SIGKILL runs no cleanup: its packed code (`ct-fleet-shipped-*`,
megabytes) and merge spool (`ct-fleet-merge-*`) would stay in TMPDIR for good. Each is
named `ct-fleet-<kind>-<pid>-<random>`; the next process that makes one of its kind removes
those whose owner is gone. A pid reused by a live process keeps its directory until that
process is gone too: a live owner's directory is never touched.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

import psutil

_OWNED = re.compile(r"ct-fleet-(?P<kind>[a-z]+)-(?P<pid>\d+)-[A-Za-z0-9_]+")


def owned_tempdir(kind: str) -> Path:
    """A new scratch directory of `kind`, after removing those of dead owners."""
    sweep(kind)
    return Path(tempfile.mkdtemp(prefix=f"ct-fleet-{kind}-{psutil.Process().pid}-"))


def sweep(kind: str, where: Path | None = None) -> list[Path]:
    """Remove the `kind` directories under `where` (TMPDIR) whose owning process is dead."""
    removed = []
    for path in Path(where or tempfile.gettempdir()).glob(f"ct-fleet-{kind}-*"):
        match = _OWNED.fullmatch(path.name)
        if match is None or match["kind"] != kind or psutil.pid_exists(int(match["pid"])):
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed

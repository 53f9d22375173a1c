"""A full disk said as such: which disk, how much room is left there, and what needed it.

A full disk is this machine's state, not a bug and not bad input; the fix is room on that
disk, or pointing what needed it (the runs directory, or TMPDIR) at another one.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from pathlib import Path

from rich.filesize import decimal

from ..paths import runs_dir

DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


def disk_full_line(exc: BaseException) -> str | None:
    """One line for an OSError of a full disk (or quota); None for any other exception."""
    if not (isinstance(exc, OSError) and exc.errno in DISK_FULL):
        return None
    written = [Path(os.fsdecode(p)) for p in (exc.filename2, exc.filename) if p]  # a copy's target first
    if not written:
        return f"no space left on a disk this run writes to: {_what_needs(None)}"
    # By the time this is said the partial file is gone, so its disk's size tells more than what is free.
    path = min(written, key=lambda p: _usage(p)[1])
    size = _usage(path)[0]
    return f"no space left on the disk at {_mount_of(path)} ({decimal(size)} in all) for {path}: {_what_needs(path)}"


def _existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _usage(path: Path) -> tuple[int, int]:
    """(size, free) of the disk holding path."""
    try:
        usage = shutil.disk_usage(_existing(path))
    except OSError:
        return 0, 0
    return usage.total, usage.free


def _mount_of(path: Path) -> Path:
    path = _existing(path.absolute())
    while not os.path.ismount(path) and path != path.parent:
        path = path.parent
    return path


def _under(path: Path, root: Path) -> bool:
    return path.absolute().is_relative_to(root.absolute())


def _what_needs(path: Path | None) -> str:
    runs, tmp = runs_dir(os.environ), Path(tempfile.gettempdir())
    if path is not None and _under(path, runs):
        return (
            f"the runs directory {runs} holds results and logs; free space there or set CT_FLEET_RUNS to another disk"
        )
    if path is not None and _under(path, tmp):
        return (
            f"temporary files (the code that ships, merges) go to {tmp}; free space there or set TMPDIR to another disk"
        )
    if path is not None:
        return "free space there"
    return f"free space under {runs} (results, CT_FLEET_RUNS) and {tmp} (temporary files, TMPDIR)"

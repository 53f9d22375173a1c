"""Unpacking a tarball as data: tarfile's "data" filter (PEP 706), which refuses absolute
paths, `..`, links that leave the destination and device files.

The standard library has it from Python 3.11.4; an older 3.11 (Debian 12's 3.11.2, which
bin/ensure-venv prefers for its optimised build) takes it from its backport, the same
module as Python 3.12 ships it.
"""

from __future__ import annotations

import gzip
import importlib
import tarfile
import zlib
from pathlib import Path
from typing import Any

_tarfile: Any = tarfile if hasattr(tarfile, "data_filter") else importlib.import_module("backports.tarfile")

__all__ = ["BadTarball", "unpack"]

# What a tarball that is not whole, or not a tarball, raises (the backport's own TarError
# where it is the one in use).
BadTarball: tuple[type[BaseException], ...] = (_tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile)


def unpack(tarball: Path, dest: Path) -> None:
    """Extract `tarball` (any compression tarfile reads) into `dest` with the data filter."""
    with _tarfile.open(tarball) as tar:
        tar.extractall(dest, filter="data")

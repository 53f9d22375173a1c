"""Where the traceback of an unexpected exception goes: a file, not the user's terminal."""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
import traceback
from pathlib import Path

from ..paths import runs_dir


def crash_dir() -> Path:
    return runs_dir(os.environ) / "crashes"


def write_crash_report(exc: BaseException) -> Path:
    """Write exc's traceback to runs/crashes/ (or the temp dir if that is not writable); return the file."""
    text = "".join(traceback.format_exception(exc))
    name = f"crash-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.txt"
    for folder in (crash_dir(), Path(tempfile.gettempdir())):
        try:
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / name
            path.write_text(text)
            return path
        except OSError:
            with contextlib.suppress(OSError):
                (folder / name).unlink(missing_ok=True)  # a full disk leaves an empty report behind
            continue
    return Path(os.devnull)

"""The two consoles every command prints to: results on stdout, diagnostics on stderr.

On a terminal rich fits output to the window. Anywhere else (a file, a pipe, CI, nohup)
a line is whole however long it is: nothing wraps and no table column is cut, since the
reader is a file viewer or a script, not an 80-column screen. rich honours NO_COLOR.
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

from rich.console import Console

# Wide enough that no line or table a run prints is ever folded; rich sizes a table to
# its content, so this is not padding.
UNBOUNDED = 100_000


def fitted(stream: TextIO) -> dict[str, Any]:
    """Console arguments for output to `stream`: the window's width, or no width at all."""
    try:
        terminal = stream.isatty()
    except ValueError:  # a closed stream
        terminal = False
    return {} if terminal else {"width": UNBOUNDED, "soft_wrap": True}


# No file given: rich writes to sys.stdout/sys.stderr as they are at each print.
console = Console(stderr=False, **fitted(sys.stdout))
err = Console(stderr=True, **fitted(sys.stderr))

"""The two consoles every command prints to: results on stdout, diagnostics on stderr.

On a terminal rich fits output to the window. Anywhere else (a file, a pipe, CI, nohup)
a line is whole however long it is: nothing wraps and no table column is cut, since the
reader is a file viewer or a script, not an 80-column screen. rich honours NO_COLOR.
"""

from __future__ import annotations

import os
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


class OutlivesItsReader:
    """stdout for a run piped into a reader that may leave first (`| head -1`).

    A write to a pipe nobody reads raises BrokenPipeError; uncaught, it would stop the fleet
    mid-run over nothing but its own progress lines. So the first one points the descriptor
    at /dev/null (later writes, and the flush at exit, then succeed), says so once on
    stderr, and the run goes on.
    """

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._reader_gone()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._reader_gone()

    def _reader_gone(self) -> None:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, self._stream.fileno())
        os.close(devnull)
        sys.stderr.write("ct-fleet: stdout was closed by its reader; the run goes on, its stdout output is dropped\n")


class EdgeConsole(Console):
    """A Console configured on first use, not on import: rich reads the environment
    (NO_COLOR, COLUMNS, TERM) and asks whether its stream is a terminal when a Console is
    made, and the CLI reads its environment at its edge, when a command runs. Until then
    the object has none of a Console's attributes; the first one asked for makes it."""

    def __init__(self, *, stderr: bool) -> None:  # Console.__init__ runs on first use
        self.__dict__["_edge_stderr"] = stderr

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or "_edge_made" in self.__dict__:
            raise AttributeError(name)
        self.__dict__["_edge_made"] = True
        stderr = self.__dict__["_edge_stderr"]
        # No file given: rich writes to sys.stdout/sys.stderr as they are at each print.
        Console.__init__(self, stderr=stderr, **fitted(sys.stderr if stderr else sys.stdout))
        return getattr(self, name)


console = EdgeConsole(stderr=False)
err = EdgeConsole(stderr=True)

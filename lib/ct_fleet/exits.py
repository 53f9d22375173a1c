"""Leaving a process that holds inspect_ai: its exit handlers, then no more."""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import NoReturn

__all__ = ["leave", "run_as_main", "wind_up"]


def wind_up() -> None:
    """What a normal exit runs that matters: the exit handlers (inspect_ai registers
    cleanups), then the buffered output."""
    with contextlib.suppress(BaseException):
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()


def leave(status: int) -> NoReturn:
    """Exit with `status` after wind_up(), skipping the interpreter's orderly run-down of
    every module and object, which for a process holding inspect_ai and its model
    providers costs 0.5 s of CPU that whoever waits for the process waits out."""
    wind_up()
    os._exit(status)


def run_as_main(main: Callable[[], object]) -> NoReturn:
    """Run a process's `main` and leave as `python` leaves after it, in its order, less
    the run-down (see `leave`): the exit status of a SystemExit (its message printed when
    it is not a number), a traceback and status 1 for any other uncaught exception,
    non-daemon threads joined (concurrent.futures' pools with them), exit handlers,
    flushed output; an uncaught KeyboardInterrupt dies by SIGINT, as python does."""
    code = 1
    try:
        main()
        code = 0
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            code = exc.code or 0
        else:
            print(exc.code, file=sys.stderr)
    except KeyboardInterrupt:
        sys.excepthook(*sys.exc_info())
        threading._shutdown()  # type: ignore[attr-defined]  # what python's own exit calls
        wind_up()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    except BaseException:
        sys.excepthook(*sys.exc_info())
    threading._shutdown()  # type: ignore[attr-defined]
    leave(code & 0xFF)

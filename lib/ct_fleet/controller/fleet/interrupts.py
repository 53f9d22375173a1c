"""Signals during a run: SIGTERM and SIGHUP stop a fleet the way Ctrl-C does, and teardown
cannot be cut short by a second signal.

Python turns SIGINT into KeyboardInterrupt but dies on SIGTERM without running any
`finally`, which would leave workers running and their secrets in SSM. `stop_signals()`
makes SIGTERM/SIGHUP raise Terminated (a KeyboardInterrupt, so every interrupt path
handles both); `shielded()` holds further signals off while secrets are deleted and
workers terminated, and re-raises the interrupt once that is done.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class FleetInterrupted(Exception):
    """Ctrl-C: the fleet was stopped, or left running (leave_running) for a later resume."""

    def __init__(self, leave_running: bool) -> None:
        super().__init__("interrupted")
        self.leave_running = leave_running


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP: stop like Ctrl-C, without asking whether to leave workers running."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    raise Terminated(signum)


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextmanager
def stop_signals() -> Iterator[None]:
    """Within the block, SIGTERM and SIGHUP raise Terminated in the main thread."""
    if not _main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, _raise_terminated) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextmanager
def shielded(warn: Callable[[str], None] = lambda text: None) -> Iterator[None]:
    """Run the block to its end even if SIGINT/SIGTERM/SIGHUP arrive; raise the interrupt after it."""
    if not _main_thread():
        yield
        return
    received: list[int] = []

    def hold(signum: int, frame: FrameType | None) -> None:
        received.append(signum)
        warn("stopping: deleting worker secrets and terminating workers first")

    sigs = (signal.SIGINT, *STOP_SIGNALS)
    previous = {sig: signal.signal(sig, hold) for sig in sigs}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if received:
        signum = received[0]
        raise KeyboardInterrupt() if signum == signal.SIGINT else Terminated(signum)

"""Watching one running job: its time limit, its memory cap, and killing it with its tree.

Both runners hand the worker something with a pid and a `wait(timeout)`: a subprocess
(the per-process runner, command jobs) or a job forked by the warm runner's server.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import time
from dataclasses import dataclass
from typing import Protocol

import psutil

POLL = 1.0  # seconds between looks at a running job's memory


class JobProcess(Protocol):
    @property
    def pid(self) -> int | None: ...

    def wait(self, timeout: float | None) -> int | None:
        """The exit code once the job has exited (negative: the signal), else None after timeout."""
        ...


class PopenJob:
    """A subprocess. Waits on a pidfd (Linux) so that an exit is seen at once: Popen.wait
    with a timeout polls, sleeping up to 50 ms between looks, which a short job pays."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self._pidfd: int | None = None
        with contextlib.suppress(OSError, AttributeError):
            self._pidfd = os.pidfd_open(proc.pid)

    @property
    def pid(self) -> int | None:
        return self.proc.pid

    def wait(self, timeout: float | None) -> int | None:
        if self._pidfd is not None and timeout is not None:
            readable, _, _ = select.select([self._pidfd], [], [], timeout)
            if not readable:
                return None
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None
        return code


class Cancel(Protocol):
    """What ends a job early once set: a threading.Event, or several at once."""

    def is_set(self) -> bool: ...


@dataclass(frozen=True)
class Ended:
    code: int
    killed: str | None = None  # "timeout", "memory" or "cancelled" when the worker killed the job
    detail: str = ""


def supervise(
    job: JobProcess,
    *,
    time_limit: float | None,
    memory_limit_mb: int | None,
    cancel: Cancel | None = None,
) -> Ended:
    """Wait for the job; kill it (and everything it started) past its time or memory limit,
    or once `cancel` is set."""
    started = time.monotonic()
    while True:
        wait = POLL if memory_limit_mb or cancel else None
        if time_limit:
            wait = max(0.0, min(wait or time_limit, started + time_limit - time.monotonic()))
        code = job.wait(wait)
        if code is not None:
            return Ended(code)
        if cancel is not None and cancel.is_set():
            return _kill(job, "cancelled", "cancelled")
        if time_limit and time.monotonic() - started >= time_limit:
            return _kill(job, "timeout", f"killed after {time_limit:.0f}s")
        if memory_limit_mb and job.pid is not None:
            rss = tree_rss_mb(job.pid)
            if rss > memory_limit_mb:
                return _kill(job, "memory", f"killed at {rss:.0f} MB, over the job memory cap of {memory_limit_mb} MB")


def _kill(job: JobProcess, why: str, detail: str) -> Ended:
    # A warm job has no pid until its server has forked it, once the server's warm-up is
    # done: wait for the pid (seconds), not for the job to end by itself (a spot notice
    # during the first job's start waited out the job's whole time limit).
    while job.pid is None:
        code = job.wait(POLL)
        if code is not None:
            return Ended(code, why, detail)
    kill_tree(job.pid)
    code = job.wait(None)
    return Ended(code if code is not None else -signal.SIGKILL, why, detail)


def tree_rss_mb(pid: int) -> float:
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    total = 0
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            total += proc.memory_info().rss
    return total / 2**20


def kill_tree(pid: int) -> None:
    """SIGKILL the job and every descendant; its process group too when it leads one
    (descendants may start sessions of their own; psutil finds them by parentage)."""
    try:
        parent = psutil.Process(pid)
        procs = [*parent.children(recursive=True), parent]
    except psutil.NoSuchProcess:
        procs = []
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if os.getpgid(pid) == pid:
            os.killpg(pid, signal.SIGKILL)
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()


# Each attempt's processes carry a token of their own in their environment (a job handed
# out twice runs twice on one worker: its job id is not enough).
ATTEMPT_VAR = "CT_ATTEMPT_ID"


def sweep_attempt(token: str, started: float) -> list[int]:
    """SIGKILL whatever the attempt started that outlived it: a process in a session of its
    own, or orphaned, is no longer in the job's tree, but carries the attempt's token."""
    killed = []
    me = os.getpid()
    for proc in psutil.process_iter(["create_time"]):
        if proc.pid == me or (proc.info["create_time"] or 0) < started - 1:
            continue
        with contextlib.suppress(psutil.Error):
            if proc.environ().get(ATTEMPT_VAR) == token:
                proc.kill()
                killed.append(proc.pid)
    return killed

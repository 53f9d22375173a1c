"""The probe's process (controller/planning/probe.py): the user's task is loaded there, in a
session of its own, never in the controller.

On Linux it is forked from the controller, which has already imported inspect_ai for its
command line: a fresh interpreter spent 1.5 of the probe's 2 s of CPU importing it again,
once per task of the run. The child then becomes what `python -m
ct_fleet.controller.planning.probe` would be: the shipped image as its working directory
and first import root, the worker-like environment, its own standard streams, default
signal handlers. Elsewhere (macOS forbids much after fork() in a process that has used
its system frameworks) it is that fresh interpreter.

The controller plans before it starts any thread, so no lock the child inherits is held
by a thread the child does not have; should a thread be running, the probe is that fresh
interpreter too.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import IO, Any, NoReturn

PROBE_MODULE = "ct_fleet.controller.planning.probe"
# The forked probe's name in ps and top (its command line is the controller's).
FORKED_NAME = "ct-fleet-probe"
# A forked child's end must be waited for with a timeout: Linux's pidfd.
FORKS = sys.platform == "linux" and hasattr(os, "pidfd_open")


class ProbeTimeout(Exception):
    pass


def run_probe(
    request: dict[str, Any],
    answer: Path,
    *,
    cwd: Path,
    env: dict[str, str],
    log: IO[bytes],
    timeout: float,
    fork: bool = FORKS,
) -> int:
    """Run the probe to its end and return its exit status (ProbeTimeout after TIMEOUT
    seconds). Whatever ends it, its whole process group is killed before this returns:
    what a task starts at import (a server, a pool) must not outlive its loading."""
    if not fork or threading.active_count() > 1:
        proc = subprocess.Popen(
            [sys.executable, "-m", PROBE_MODULE, str(answer)],
            stdin=subprocess.PIPE,
            cwd=cwd,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=log,
            start_new_session=True,
        )
        try:
            proc.communicate(json.dumps(request).encode(), timeout=timeout)
        except subprocess.TimeoutExpired:
            raise ProbeTimeout from None
        finally:
            _kill_group(proc.pid)
            proc.wait()
        return proc.returncode
    # What the controller has buffered goes out once, from here, not again from the child.
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        _become_probe(request, answer, cwd, env, log.fileno())
    status: int | None = None
    try:
        status = _wait(pid, timeout)
        if status is None:
            raise ProbeTimeout
        return status
    finally:
        _kill_group(pid)
        if status is None:
            os.waitpid(pid, 0)


def _wait(pid: int, timeout: float) -> int | None:
    """PID's exit status (a negative one: the signal that ended it), or None once TIMEOUT
    seconds have passed with it still running."""
    deadline = time.monotonic() + timeout
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:  # a kernel before 5.3, or a seccomp profile that refuses it: poll
        while (done := os.waitpid(pid, os.WNOHANG))[0] == 0:
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.02)
        return os.waitstatus_to_exitcode(done[1])
    try:
        while not select.select([pidfd], [], [], max(0.0, deadline - time.monotonic()))[0]:
            if time.monotonic() >= deadline:
                return None
        return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    finally:
        os.close(pidfd)


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)  # the group outlives its leader while a member lives
    except (ProcessLookupError, PermissionError):
        pass


def _become_probe(request: dict[str, Any], answer: Path, cwd: Path, env: dict[str, str], log_fd: int) -> NoReturn:
    """In the forked child: set up as the interpreter `python -m PROBE_MODULE` started with
    ENV in CWD would be, answer, and exit without running the controller's exit handlers."""
    code = 1
    try:
        os.setsid()
        Path("/proc/self/comm").write_text(FORKED_NAME)
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
            signal.signal(signum, signal.SIG_DFL)
        signal.set_wakeup_fd(-1)
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 1)
        os.dup2(log_fd, 2)
        # Streams of its own on those: the controller's may be anything that writes elsewhere.
        sys.stdin = open(0, closefd=False)
        sys.stdout = open(1, "w", closefd=False)
        sys.stderr = open(2, "w", closefd=False)
        os.chdir(cwd)
        given = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        os.environ.clear()
        os.environ.update(env)
        roots = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        # As Python would build it: the working directory (for -m), PYTHONPATH, then the rest.
        sys.path[:] = [str(cwd), *roots, *(p for p in sys.path[1:] if p not in given and p not in roots)]
        sys.dont_write_bytecode = bool(env.get("PYTHONDONTWRITEBYTECODE"))
        from . import probe

        sys.argv = [probe.__file__, str(answer)]
        code = probe.answer_to(request, answer)
    except BaseException:  # the child must never return into the controller's code
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)

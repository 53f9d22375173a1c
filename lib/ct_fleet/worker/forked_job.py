"""A job's life in a child forked from the warm runner's server (worker/forkserver.py):
killed by the kernel when the server dies, a subreaper of what it starts, the server's
sockets closed, the job's log file as stdout and stderr, then runner.run_inspect with the
task the server built. The modules the job imported on its own are reported back, so
that the server imports them for the next jobs."""

from __future__ import annotations

import contextlib
import ctypes
import os
import selectors
import signal
import socket
import sys
import traceback
from pathlib import Path
from typing import Any, NoReturn

from ..exits import leave
from ..protocol import WorkMessage
from . import runner

PR_SET_PDEATHSIG = 1  # linux/prctl.h
PR_SET_CHILD_SUBREAPER = 36


def run(
    request: dict[str, Any],
    job: WorkMessage,
    task: Any,
    *,
    close: list[socket.socket | selectors.BaseSelector],
    fds: list[int],
    report_dir: Path,
    environ: dict[str, str],
) -> NoReturn:
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        for signum in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, signal.SIG_DFL)
        for what in close:  # the server's selector and sockets
            what.close()
        for fd in fds:
            os.close(fd)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        out = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.close(null)
        os.close(out)
        os.chdir(request["cwd"])
        os.environ.update(request["env"])
        before = set(sys.modules)
        runner.run_inspect(
            job,
            Path(request["out"]),
            task,
            runner.extra_root(environ),
            request["env"].get(runner.CHECKPOINTS_ENV),
        )
        new = sorted(set(sys.modules) - before)
        if new:
            report = report_dir / f"{os.getpid()}.modules"
            report.with_suffix(".tmp").write_text("\n".join(new))
            report.with_suffix(".tmp").replace(report)
        code = 0
    except SystemExit as ex:
        code = ex.code if isinstance(ex.code, int) else 1
    except Exception as ex:
        code = runner.report_failure(ex)
    except BaseException:
        traceback.print_exc()
    finally:
        leave(code)  # the server's own state must not run down a second time


def die_with(server: int) -> None:
    """Have the kernel SIGKILL this child when the server dies (Linux). A job stays in the
    server's process group, so killing an instance's group ends it too; this covers a
    server killed on its own, whose children would otherwise run on, orphaned."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != server:  # it died before the prctl took effect
        os._exit(1)


def subreaper() -> None:
    """Orphaned descendants come to this process instead of init (Linux): see _end_orphans."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1)

"""The warm runner's server: inspect_ai imported once, each task built once, every job
run in a child forked from here.

    python -m ct_fleet.worker.forkserver SOCKET_DIR      (started by worker/warm.py)

Why a process of its own: fork() is only safe from a process with no other thread
running (a thread that holds a lock at fork time leaves the child deadlocked on it),
and the worker runs many. This process stays single-threaded: one select loop accepts a
connection per job, builds the job's task unless it has already (cached by
runner.task_key), forks, answers with the child's pid and, once the child has exited,
with its exit status.

The child is the job as the per-process runner runs it: in the worker's process group
(killing an instance's group ends its jobs), killed by the kernel if the server dies,
the job's environment variables, stdout and stderr to the job's log file, the code root as
cwd; it calls runner.run_inspect with the built task and exits 0 when OUT holds a
finished log. A crash, a leak or a hung sandbox ends that child only.

Before the first job the server runs one throwaway eval of a no-op task, so that what
inspect imports and caches on a process's first eval (seconds) is not paid by every
child; what a job's own task, sandbox or model imports lazily the children report back,
and the server imports it too. Should any of that (or a task) leave a thread running
here, the server stops forking and runs each further job as
`python -m ct_fleet.worker.runner`: cold, but safe.

The server exits when its stdin closes (the worker is done, or died), killing any child
left. Wire format, one JSON object per line: request {"job": <work message JSON>,
"out": path, "log": path, "cwd": path, "env": {name: value}}; replies {"pid": n} then
{"exit": code} (a negative code is the signal that ended the child), or {"exit": code}
alone when the job's task could not be built (failures.TASK_FAILED; the reason is in its log file).
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from ..exits import leave
from ..protocol import WorkMessage
from . import checkpoints, failures, forked_job, runner
from .supervise import kill_tree

SOCKET_NAME = "warm.sock"

# Seconds the warm-up eval's helper threads (anyio's worker threads) get to finish.
THREADS_GRACE = 30.0


def log(message: str) -> None:
    print(f"ct-fleet warm runner: {message}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def _kept() -> Iterator[None]:
    """Build what the server keeps (imports, tasks) with the collector off, then freeze it:
    the pattern gc.freeze's documentation gives for a server that forks without exec.
    Collections during a large import only walk the long-lived objects being built (a fifth
    of the CPU of importing inspect_ai and its providers), and frozen objects are never
    walked again, here or in a child, whose pages then stay shared."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if was_enabled:
            gc.enable()


@dataclass
class Child:
    conn: socket.socket
    out: Path  # the job's OUT: what a killed job leaves is found from it
    cold: subprocess.Popen[bytes] | None = None  # set when run as a fresh interpreter


@dataclass
class Pending:
    conn: socket.socket
    buf: bytes = b""


@dataclass
class ForkServer:
    sock_dir: Path
    environ: dict[str, str]  # the server's, as its entry read it: a cold job's inherits it
    tasks: dict[str, Any] = field(default_factory=dict)
    children: dict[int, Child] = field(default_factory=dict)
    pending: dict[int, Pending] = field(default_factory=dict)  # fd -> connection not yet read
    cold: bool = False
    orphans: set[int] = field(default_factory=set)  # what jobs that ended left running, killed

    def __post_init__(self) -> None:
        self.sel = selectors.DefaultSelector()
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.wake_r, self.wake_w = os.pipe()

    # -- set-up ------------------------------------------------------------------------
    def listen(self) -> None:
        """Bind first: requests wait in the backlog while inspect_ai is being imported."""
        path = self.sock_dir / SOCKET_NAME
        tmp = self.sock_dir / f".{SOCKET_NAME}.{os.getpid()}"
        self.listener.bind(str(tmp))
        self.listener.listen(256)
        os.replace(tmp, path)  # the client connects once the name exists

    def preload(self) -> None:
        """Import inspect_ai and run one throwaway eval here, so that what inspect imports
        and caches on its first eval (model providers pull in the anthropic and openai
        SDKs: seconds) is paid once, not by every child."""
        with _kept():
            self._warm_up()
        deadline = time.monotonic() + THREADS_GRACE
        while threading.active_count() > 1 and time.monotonic() < deadline:
            time.sleep(0.05)

    def _warm_up(self) -> None:
        import inspect_ai
        from inspect_ai.dataset import Sample
        from inspect_ai.model import get_model_info
        from inspect_ai.solver import Generate, Solver, TaskState, solver

        # Inspect reads its model database (YAML: 0.2-1 s of CPU) on a process's first model
        # request: read once here, not by every job while it holds a model budget token.
        get_model_info("mockllm/ct-fleet-warm-up")

        # No model call: mockllm's generate counts tokens with a tiktoken file it downloads,
        # so offline the warm-up failed, and rendering its traceback cost seconds of CPU.
        # Starting the sample is what imports and caches the providers.
        @solver
        def ct_fleet_warm_up() -> Solver:
            async def solve(state: TaskState, generate: Generate) -> TaskState:
                return state

            return solve

        with tempfile.TemporaryDirectory(prefix="ct-warm-up-") as log_dir, contextlib.redirect_stdout(sys.stderr):
            inspect_ai.eval(
                inspect_ai.Task(
                    dataset=[Sample(id="warm-up", input="warm-up")], solver=ct_fleet_warm_up(), name="ct_fleet_warm_up"
                ),
                model="mockllm/ct-fleet-warm-up",  # not a job's model: no cached model is shared
                log_dir=log_dir,
                **runner.JOB_PROCESS,
            )

    def _import(self, names: list[str] | tuple[str, ...]) -> None:
        with _kept():
            for name in names:
                if name in sys.modules or name.startswith("__"):
                    continue
                try:
                    importlib.import_module(name)
                except BaseException as ex:  # a module that fails here fails in the child too
                    if isinstance(ex, KeyboardInterrupt):
                        raise
        if threading.active_count() > 1 and not self.cold:
            self.cold = True
            log("a preloaded module left a thread running: further jobs run in fresh interpreters")

    # -- the loop ----------------------------------------------------------------------
    def serve(self) -> None:
        forked_job.subreaper()
        os.set_blocking(self.wake_w, False)
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda signum, frame: None)
        self.sel.register(self.listener, selectors.EVENT_READ, "accept")
        self.sel.register(self.wake_r, selectors.EVENT_READ, "wake")
        self.sel.register(sys.stdin.fileno(), selectors.EVENT_READ, "stdin")
        while True:
            for key, _ in self.sel.select(timeout=5.0):
                if key.data == "accept":
                    conn, _ = self.listener.accept()
                    self.pending[conn.fileno()] = Pending(conn)
                    self.sel.register(conn, selectors.EVENT_READ, "request")
                elif key.data == "request":
                    self._read_request(key.fd)
                elif key.data == "watch":
                    self._client_gone(key.fd)
                elif key.data == "wake":
                    with contextlib.suppress(BlockingIOError):
                        os.read(self.wake_r, 4096)
                elif key.data == "stdin" and not os.read(sys.stdin.fileno(), 4096):
                    self.shutdown()
                    return
            self._reap()

    def _read_request(self, fd: int) -> None:
        pending = self.pending[fd]
        data = pending.conn.recv(65536)
        pending.buf += data
        if not data or b"\n" in pending.buf:
            self.sel.unregister(pending.conn)
            del self.pending[fd]
            if not data:
                pending.conn.close()
                return
            self._start(pending.conn, json.loads(pending.buf.split(b"\n", 1)[0]))

    def _start(self, conn: socket.socket, request: dict[str, Any]) -> None:
        job = WorkMessage.from_json(request["job"])
        key = runner.task_key(job)
        if key not in self.tasks:
            try:
                with _kept():
                    self.tasks[key] = runner.build_task(job, runner.extra_root(self.environ))
            except Exception as exc:
                with open(request["log"], "a") as out:
                    out.write(f"building the task of job {job.job_id} failed:\n{traceback.format_exc()}")
                    out.write(failures.summary_line(exc) + "\n")
                _send(conn, {"exit": failures.exit_status(exc)})
                conn.close()
                return
            self._import([])  # the check for threads a task may have started
        if self.cold:
            pid, child = self._spawn_cold(request, conn)
        else:
            pid, child = self._fork(request, job, self.tasks[key], conn), Child(conn, Path(request["out"]))
        self.children[pid] = child
        _send(conn, {"pid": pid})
        # An early EOF from the client means the worker gave up on the job: kill it.
        self.sel.register(conn, selectors.EVENT_READ, "watch")

    def _client_gone(self, fd: int) -> None:
        for pid, child in self.children.items():
            if child.conn.fileno() == fd:
                with contextlib.suppress(OSError):
                    if child.conn.recv(1):
                        return  # clients send nothing more; ignore stray bytes
                self.sel.unregister(child.conn)
                kill_tree(pid)
                return

    def _reap(self) -> None:
        ended = False
        for pid, child in list(self.children.items()):
            if child.cold is not None:
                code = child.cold.poll()
            else:
                done, status = os.waitpid(pid, os.WNOHANG)
                code = os.waitstatus_to_exitcode(status) if done else None
            if code is None:
                continue
            del self.children[pid]
            if code != 0:
                _clear_leftovers(child.out, pid)
            with contextlib.suppress(KeyError, ValueError):
                self.sel.unregister(child.conn)
            with contextlib.suppress(OSError):
                _send(child.conn, {"exit": code})
            child.conn.close()
            self._learn(pid)
            ended = True
        if ended or self.orphans:
            self._end_orphans()

    def _end_orphans(self) -> None:
        """A job's processes die with it. Each job is a subreaper, so what it starts stays
        below it while it runs, even once the process that started it exits; when the job
        itself ends (a kill, a crash, or a clean end that left something behind), those
        processes come up to this server (a subreaper too): any child that is not a job is
        one, and is killed here."""
        for proc in psutil.Process().children():
            if proc.pid not in self.children and proc.pid not in self.orphans:
                kill_tree(proc.pid)
                self.orphans.add(proc.pid)
        for pid in list(self.orphans):
            with contextlib.suppress(ChildProcessError):
                if not os.waitpid(pid, os.WNOHANG)[0]:
                    continue
            self.orphans.discard(pid)

    def _learn(self, pid: int) -> None:
        report = self.sock_dir / f"{pid}.modules"
        if self.cold or not report.exists():
            return
        names = report.read_text().split()
        report.unlink()
        self._import(names)

    def shutdown(self) -> None:
        for pid in list(self.children):
            kill_tree(pid)
        for pid, child in self.children.items():
            if child.cold is not None:
                child.cold.wait()
            else:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, 0)

    # -- starting a job ----------------------------------------------------------------
    def _fork(self, request: dict[str, Any], job: WorkMessage, task: Any, conn: socket.socket) -> int:
        # Everything imported and built so far moves to the collector's permanent
        # generation: a child's collections then never walk (and so never copy-on-write)
        # the server's pages.
        gc.freeze()
        server = os.getpid()
        pid = os.fork()
        if pid == 0:
            forked_job.die_with(server)
            forked_job.subreaper()
            # The server's sockets and pipes are not the job's: a client must see EOF when
            # the server dies, not when its last child exits.
            ours: list[socket.socket | selectors.BaseSelector] = [
                self.sel,
                self.listener,
                conn,
                *(p.conn for p in self.pending.values()),
                *(c.conn for c in self.children.values()),
            ]
            forked_job.run(
                request,
                job,
                task,
                close=ours,
                fds=[self.wake_r, self.wake_w],
                report_dir=self.sock_dir,
                environ=self.environ,
            )
        return pid

    def _spawn_cold(self, request: dict[str, Any], conn: socket.socket) -> tuple[int, Child]:
        with open(request["log"], "wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "ct_fleet.worker.runner", request["job"], request["out"]],
                cwd=request["cwd"],
                env={**self.environ, **request["env"]},
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                process_group=0,
            )
        return proc.pid, Child(conn, Path(request["out"]), cold=proc)


def _clear_leftovers(out: Path, pid: int) -> None:
    """What a job that did not end well (killed mid-sample, say) leaves: its log directory,
    the staging of its checkpoints, and the sample buffer Inspect keeps for it. Inspect
    deletes a leaked buffer only when it is 3 days old, and until then every eval on the
    machine stats it (leaked by the thousand, that was half of a one-sample eval's CPU)."""
    from ..inspect_private import sample_buffer_dir

    log_dir = runner.job_log_dir(out, pid)
    with contextlib.suppress(Exception):
        shutil.rmtree(sample_buffer_dir(log_dir), ignore_errors=True)
    with contextlib.suppress(Exception):
        checkpoints.drop_staging(log_dir)  # its checkpoints' staging (and restic password)
    shutil.rmtree(log_dir, ignore_errors=True)


def _send(conn: socket.socket, message: dict[str, Any]) -> None:
    conn.sendall(json.dumps(message).encode() + b"\n")


def main(argv: list[str]) -> int:
    server = ForkServer(Path(argv[1]), dict(os.environ))
    server.listen()
    server.preload()
    if threading.active_count() > 1:
        server.cold = True
        log("importing inspect_ai left a thread running: jobs run in fresh interpreters")
    server.serve()
    return 0


if __name__ == "__main__":
    leave(main(sys.argv))

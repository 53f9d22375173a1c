"""The warm runner, worker side: a fork server per worker, one connection per job.

The worker starts worker/forkserver.py at its first job (fleet.env's WARM_RUNNER, which the
controller sets only for fleets of Inspect jobs), from the code root with its own
environment, and talks to it over a Unix socket in a private temporary directory. Not at
the worker's own start: the server's warm-up is seconds of CPU, which a worker that finds
the queue empty (the fleet's tail, a replacement launched late) would spend for nothing,
while a worker that gets a job at once waits for the same warm-up either way.

Each job is one connection: a request, then the forked child's pid, then its exit status.
The worker keeps doing what it does for a subprocess: it enforces the time limit and the
memory cap and kills the job's tree (supervise.py).

If the server dies, the jobs it was running end as infrastructure errors (retried) and
the next job starts a new server.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from ..protocol import WorkMessage
from .forkserver import SOCKET_NAME
from .supervise import kill_tree

CONNECT_TIMEOUT = 120.0  # the server binds at once; only a machine under heavy load is slower


class WarmJob:
    """One job running in a child of the fork server."""

    def __init__(self, conn: socket.socket, log_path: Path, on_server_died: Callable[[], None]) -> None:
        self.conn = conn
        self.log_path = log_path
        self._on_server_died = on_server_died
        self._pid: int | None = None
        self._code: int | None = None
        self._buf = b""

    @property
    def pid(self) -> int | None:
        return self._pid

    def wait(self, timeout: float | None) -> int | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._code is None:
            if b"\n" in self._buf:
                line, self._buf = self._buf.split(b"\n", 1)
                reply = json.loads(line)
                if "pid" in reply:
                    self._pid = int(reply["pid"])
                if "exit" in reply:
                    self._finish(int(reply["exit"]))
                continue
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return None
            self.conn.settimeout(left)
            try:
                data = self.conn.recv(4096)
            except TimeoutError:
                return None
            except OSError:
                data = b""
            if not data:
                self._server_died()
            self._buf += data
        return self._code

    def _server_died(self) -> None:
        self._on_server_died()
        # Its child may still run, orphaned: it is no use to anyone now.
        if self._pid is not None:
            kill_tree(self._pid)
        with open(self.log_path, "a") as out:
            out.write("\nthe warm runner's server died while this job ran\n")
        self._finish(-signal.SIGKILL)

    def _finish(self, code: int) -> None:
        self._code = code
        self.conn.close()


class WarmRunner:
    def __init__(self, code_root: Path, environ: Mapping[str, str]) -> None:
        self.code_root = code_root
        self.environ = environ  # the worker's: its server inherits it
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._dir: Path | None = None
        self._dead = False

    def _server(self) -> tuple[Path, subprocess.Popen[bytes]]:
        with self._lock:
            # The socket closes before the killed server can be reaped, so poll() alone
            # would hand the next job to a server its last job already saw die.
            if self._proc is not None and not self._dead and self._proc.poll() is None and self._dir is not None:
                return self._dir / SOCKET_NAME, self._proc
            self._stop()
            self._dead = False
            # A short private path: Unix socket names are limited to ~107 bytes.
            self._dir = Path(tempfile.mkdtemp(prefix="ct-warm-"))
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "ct_fleet.worker.forkserver", str(self._dir)],
                cwd=self.code_root,
                env={**self.environ, "PYTHONUNBUFFERED": "1"},
                stdin=subprocess.PIPE,
            )
            return self._dir / SOCKET_NAME, self._proc

    def start(self, job: WorkMessage, out: Path, log_path: Path, env: dict[str, str]) -> WarmJob:
        path, proc = self._server()
        request = {"job": job.to_json(), "out": str(out), "log": str(log_path), "cwd": str(self.code_root), "env": env}
        conn = self._connect(path, proc)
        conn.sendall(json.dumps(request).encode() + b"\n")
        return WarmJob(conn, log_path, lambda: self._server_died(proc))

    def _server_died(self, proc: subprocess.Popen[bytes]) -> None:
        with self._lock:
            if proc is self._proc:
                self._dead = True

    def _connect(self, path: Path, proc: subprocess.Popen[bytes]) -> socket.socket:
        deadline = time.monotonic() + CONNECT_TIMEOUT
        while True:
            conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                conn.connect(str(path))
                return conn
            except (FileNotFoundError, ConnectionRefusedError):
                conn.close()
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("the warm runner's server did not start") from None
                time.sleep(0.05)

    def close(self) -> None:
        with self._lock:
            self._stop()

    def _stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.stdin is not None:
                with contextlib.suppress(OSError):
                    proc.stdin.close()  # the server's signal to kill what is left and exit
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                kill_tree(proc.pid)
                proc.wait()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

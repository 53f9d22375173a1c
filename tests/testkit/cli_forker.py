"""Run `ct-fleet` command lines as processes forked from one that has already imported
what the CLI and the controller import (boto3, pydantic, rich, inspect_ai: 1.3 s of CPU
per process). Each run is still a process of its own, with its own pid, environment,
working directory, standard streams, signals and exit status: the tests that signal,
kill or watch a controller see what they would see of `bin/ct-fleet`.

The server (one per pytest process, started on first use, gone when its stdin closes):

    python tests/testkit/cli_forker.py SOCKET

takes one connection per run: a JSON line {"args", "env", "cwd"} sent with three file
descriptors (the run's stdin, stdout and stderr), answers {"pid": N} once forked and
{"code": N} when the run ends (negative: the signal that ended it, as subprocess has it).

ct_fleet's modules read neither the environment nor the terminal when imported (its
consoles are made on first use), so a forked run takes its own. What Python itself reads
at start-up (PYTHON* variables, the locale) cannot be changed after the fork: a run whose
environment differs there is started as `bin/ct-fleet` instead (see `Forker.popen`).
"""

from __future__ import annotations

import atexit
import gc
import json
import os
import select
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, NoReturn

from ct_fleet.exits import run_as_main

REPO = Path(__file__).resolve().parents[2]
CLI_MAIN = REPO / "lib" / "ct_fleet" / "cli" / "__main__.py"


def _read_at_start_up(name: str) -> bool:
    return name.startswith("PYTHON") or name in ("LANG", "LANGUAGE", "CT_FLEET_VENV") or name.startswith("LC_")


# -- the server ----------------------------------------------------------------------------
def _preload() -> str:
    """Import what a controller imports, before any fork; returns the uv that bin/ct-fleet
    would hand its controller. As gc.freeze's documentation has a forking server do: the
    collector off while importing, what was imported frozen before the first fork."""
    gc.disable()
    import boto3
    import boto3.s3.transfer  # noqa: F401
    import inspect_ai
    import inspect_ai.log  # noqa: F401

    import ct_fleet.cli.main
    import ct_fleet.controller  # noqa: F401
    from ct_fleet.cli.eval_cmd import build_eval_command

    build_eval_command()  # `eval` takes Inspect's options, read from Inspect's own command

    gc.freeze()
    gc.enable()

    uv = subprocess.run(
        ["bash", "-c", 'source "$1" && find_uv', "_", str(REPO / "bin" / "ensure-venv")],
        capture_output=True,
        text=True,
        check=True,
    )
    return uv.stdout.strip()


def _run_in_child(request: dict[str, Any], fds: list[int], uv: str) -> NoReturn:
    """In the forked child: become the run, as `python -m ct_fleet.cli ARGS` would be, and
    end as it ends (ct_fleet.exits.run_as_main, which the CLI's own __main__ runs)."""

    def become_the_run() -> None:
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in fds:
            if fd > 2:
                os.close(fd)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.environ.clear()
        os.environ.update(request["env"])
        os.environ.setdefault("CT_FLEET_UV", uv)
        tempfile.tempdir = None  # gettempdir() caches TMPDIR: the run's own is wanted
        os.chdir(request["cwd"])
        sys.argv = [str(CLI_MAIN), *request["args"]]
        from ct_fleet.cli.main import main

        main()

    run_as_main(become_the_run)


def serve(path: str) -> None:
    uv = _preload()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ, "accept")
    sel.register(sys.stdin, selectors.EVENT_READ, "stdin")
    while True:
        for key, _ in sel.select():
            if key.data == "stdin":
                if not os.read(sys.stdin.fileno(), 4096):
                    return  # the pytest process is gone; runs already forked go on alone
            elif key.data == "accept":
                conn, _ = listener.accept()
                request, fds = _receive(conn)
                pid = os.fork()
                if pid == 0:
                    sel.close()
                    listener.close()
                    conn.close()
                    _run_in_child(request, fds, uv)
                for fd in fds:
                    os.close(fd)
                pidfd = os.pidfd_open(pid)
                sel.register(pidfd, selectors.EVENT_READ, (pid, conn))
                _send(conn, {"pid": pid})
            else:
                pid, conn = key.data
                sel.unregister(key.fileobj)
                os.close(key.fd)
                _, status = os.waitpid(pid, 0)
                _send(conn, {"code": os.waitstatus_to_exitcode(status)})
                conn.close()


def _receive(conn: socket.socket) -> tuple[dict[str, Any], list[int]]:
    data, fds, _, _ = socket.recv_fds(conn, 1 << 16, 3)
    while not data.endswith(b"\n"):
        more = conn.recv(1 << 16)
        if not more:
            raise EOFError("the client hung up mid-request")
        data += more
    return json.loads(data), fds


def _send(conn: socket.socket, message: dict[str, int]) -> None:
    try:
        conn.sendall(json.dumps(message).encode() + b"\n")
    except OSError:
        pass  # the test gave up on this run


# -- the client ----------------------------------------------------------------------------
class ForkedRun:
    """One forked run, with the parts of subprocess.Popen the tests use."""

    def __init__(self, conn: socket.socket, stdout: int | None, stderr: int | None) -> None:
        self._conn = conn
        self._buffer = b""
        self._read: dict[int, list[bytes]] = {}  # output read by communicate, per descriptor
        self.args = [str(CLI_MAIN)]
        self.pid = int(self._reply(None)["pid"])
        self.returncode: int | None = None
        self.stdout = os.fdopen(stdout, "r") if stdout is not None else None
        self.stderr = os.fdopen(stderr, "r") if stderr is not None else None

    def _reply(self, timeout: float | None) -> dict[str, int]:
        """The server's next line; TimeoutExpired if none comes within timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([self._conn], [], [], left)[0]:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            data = self._conn.recv(4096)
            if not data:
                raise RuntimeError("tests/testkit/cli_forker.py went away during a run")
            self._buffer += data
        line, _, self._buffer = self._buffer.partition(b"\n")
        return json.loads(line)

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                self.wait(0)
            except subprocess.TimeoutExpired:
                pass
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = int(self._reply(timeout)["code"])
            self._conn.close()
        return self.returncode

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        """Both streams to their end, then the exit status; on a timeout what was read so
        far is kept for the next call, as subprocess.Popen does."""
        deadline = None if timeout is None else time.monotonic() + timeout
        streams = [s for s in (self.stdout, self.stderr) if s is not None and not s.closed]
        with selectors.DefaultSelector() as sel:
            for stream in streams:
                sel.register(stream, selectors.EVENT_READ)
            while sel.get_map():
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise subprocess.TimeoutExpired(self.args, timeout)
                for key, _ in sel.select(left):
                    data = os.read(key.fd, 1 << 16)
                    if data:
                        self._read.setdefault(key.fd, []).append(data)
                    else:
                        sel.unregister(key.fileobj)
        texts = {}
        for stream in streams:
            texts[id(stream)] = b"".join(self._read.pop(stream.fileno(), [])).decode(errors="replace")
            stream.close()
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        self.wait(left)
        return texts.get(id(self.stdout), ""), texts.get(id(self.stderr), "")

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Forker:
    """A client of one server, started on first use and shared by the threads of a test."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._server: subprocess.Popen[bytes] | None = None
        self._dir = ""
        self._env = dict(os.environ)  # the server's: what its Python read at start-up

    def _path(self) -> str:
        with self._lock:
            if self._server is None or self._server.poll() is not None:
                self._dir = tempfile.mkdtemp(prefix="ct-forker-")
                self._server = subprocess.Popen(
                    [sys.executable, __file__, f"{self._dir}/s"],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    cwd=REPO,
                    env=self._env,
                )
                assert self._server.stdout is not None
                if self._server.stdout.readline() != b"ready\n":
                    raise RuntimeError("tests/testkit/cli_forker.py did not start (its error is above)")
            return f"{self._dir}/s"

    def can_fork(self, env: dict[str, str]) -> bool:
        return all(env.get(k) == self._env.get(k) for k in {*env, *self._env} if _read_at_start_up(k))

    def fork(
        self,
        args: list[str],
        *,
        env: dict[str, str],
        cwd: Path | str,
        stdin: int | None = None,
        stdout: int | None = None,
        stderr: int | None = None,
    ) -> ForkedRun:
        """Fork a run. stdout/stderr: a file descriptor to write to, or None for a pipe the
        returned run reads (its .stdout/.stderr)."""
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(self._path())
        opened: list[int] = []
        ours: list[int | None] = [None, None]
        given = [stdin, stdout, stderr]
        for n in (1, 2):
            if given[n] is None:
                read, write = os.pipe()
                ours[n - 1], given[n] = read, write
                opened.append(write)
        if given[0] is None:
            given[0] = os.open(os.devnull, os.O_RDONLY)
            opened.append(given[0])
        request = {"args": args, "env": env, "cwd": str(cwd)}
        try:
            socket.send_fds(conn, [json.dumps(request).encode() + b"\n"], [fd for fd in given if fd is not None])
        finally:
            for fd in opened:
                os.close(fd)
        return ForkedRun(conn, ours[0], ours[1])

    def popen(self, args: list[str], *, env: dict[str, str], cwd: Path | str) -> ForkedRun | subprocess.Popen[str]:
        """`bin/ct-fleet ARGS` with piped output: forked when Python's start-up would read
        the same environment as this process's, else bin/ct-fleet itself."""
        if self.can_fork(env):
            return self.fork(args, env=env, cwd=cwd)
        return subprocess.Popen(
            [str(REPO / "bin" / "ct-fleet"), *args],
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def close(self) -> None:
        with self._lock:
            if self._server is not None:
                assert self._server.stdin is not None
                self._server.stdin.close()
                self._server.wait(timeout=30)
                self._server = None
                shutil.rmtree(self._dir, ignore_errors=True)


FORKER = Forker()
atexit.register(FORKER.close)


if __name__ == "__main__":
    serve(sys.argv[1])

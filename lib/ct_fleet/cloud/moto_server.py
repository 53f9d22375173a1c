"""A moto server on a free loopback port, run as its own process.

It is the embedded cloud's AWS: S3, SQS, EC2, SSM, STS and IAM over real HTTP, so boto3
and the AWS CLI talk to it exactly as they talk to AWS. It runs in a separate process so
that its CPU work (moto's SQS is linear in queue depth) does not share the controller's GIL,
and so that it outlives a controller that is killed: a rerun of the same command adopts
the server and the fleet still running on it.

With a lease file the server lives as long as the process holding the lease (the
controller, however long it is suspended: a stopped process is alive), and then
lease_timeout seconds more, so that a rerun of a killed controller can adopt it, while a
server whose controller died and was never rerun does not linger.

    python -m ct_fleet.cloud.moto_server --port P [--lease FILE --lease-timeout S]
"""

from __future__ import annotations

import argparse
import gc
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from ..environment import inherited

# moto accepts any credentials; these are placeholders, not secrets.
EMBEDDED_ACCESS_KEY = "ctfleetembedded"
EMBEDDED_SECRET_KEY = "ctfleetembedded"
DEFAULT_LEASE_TIMEOUT = 600
EXIT_WORDS = "moto server exiting"
# A gated server answers only requests made with its own key (cloud/embedded.py): it is
# given to the server in its environment, never on its command line (ps shows that).
KEY_VAR = "CT_MOTO_ACCESS_KEY"
KEY_HEADER = "X-Ct-Fleet-Key"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _answers(url: str, key: str = "") -> bool:
    try:
        with urllib.request.urlopen(urllib.request.Request(f"{url}/moto-api/", headers={KEY_HEADER: key}), timeout=1):
            return True
    except OSError:
        return False


def _write_private(path: Path, text: str) -> None:
    """A file only its owner reads: what it holds leads to the fleet's cloud and its secrets."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        os.fchmod(fd, 0o600)
        fh.write(text)


def credentials(log_path: Path) -> tuple[str, str]:
    """The (access key, secret key) of the gated server whose log is `log_path` (a run's)."""
    key, secret = log_path.with_suffix(".credentials").read_text().split()
    return key, secret


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


@dataclass
class MotoServer:
    """start() launches a server (or adopts a live one recorded in state_dir); stop() ends it."""

    port: int = 0
    log_path: Path | None = None
    lease_timeout: int = DEFAULT_LEASE_TIMEOUT
    pid: int | None = None
    adopted: bool = False
    # Gated: the server answers only requests signed with this server's own random key (a
    # stranger on this machine who finds the port gets a 403, never the fleet's secrets).
    gated: bool = False
    access_key: str = EMBEDDED_ACCESS_KEY
    secret_key: str = EMBEDDED_SECRET_KEY

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _state(self, suffix: str) -> Path | None:
        return self.log_path.with_suffix(suffix) if self.log_path else None

    def renew(self) -> None:
        """Hold the lease: this process (a controller driving the fleet) keeps the server."""
        lease = self._state(".lease")
        if lease:
            lease.write_text(_holder(os.getpid()))

    def running(self) -> bool:
        """Is the server process still there (a killed or crashed server is not)?"""
        return self.pid is not None and self._is_ours()

    def last_words(self) -> str:
        """The server's own last word on why it exited (its lease ran out), if it said one."""
        if not (self.log_path and self.log_path.exists()):
            return ""
        with open(self.log_path, "rb") as fh:
            fh.seek(max(0, fh.seek(0, os.SEEK_END) - 4096))
            lines = fh.read().decode(errors="replace").strip().splitlines()
        return lines[-1].strip() if lines and lines[-1].endswith(EXIT_WORDS) else ""

    def _adopt(self) -> bool:
        pid_file, port_file = self._state(".pid"), self._state(".port")
        if not (pid_file and port_file and pid_file.exists() and port_file.exists()):
            return False
        pid, port = int(pid_file.read_text()), int(port_file.read_text())
        if self.gated:
            try:
                self.access_key, self.secret_key = credentials(pid_file)
            except (OSError, ValueError):
                return False
        if not _alive(pid) or not _answers(f"http://127.0.0.1:{port}", self.access_key):
            return False
        self.pid, self.port, self.adopted = pid, port, True
        self.renew()
        return True

    def start(self, timeout: float = 30.0) -> "MotoServer":
        if self._adopt():
            return self
        self.port = free_port()
        # ~1,300 default AMIs and their snapshots make every describe slow; we register our own.
        env = {"MOTO_EC2_LOAD_DEFAULT_AMIS": "false", **inherited()}
        if self.gated:
            self.access_key = "AKCT" + secrets.token_hex(8).upper()
            self.secret_key = secrets.token_urlsafe(30)
            env[KEY_VAR] = self.access_key
            if self.log_path:
                _write_private(self.log_path.with_suffix(".credentials"), f"{self.access_key} {self.secret_key}\n")
        cmd = [sys.executable, "-m", "ct_fleet.cloud.moto_server", "--port", str(self.port)]
        lease = self._state(".lease")
        if lease:
            lease.write_text(_holder(os.getpid()))
            cmd += ["--lease", str(lease), "--lease-timeout", str(self.lease_timeout)]
        log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        proc = subprocess.Popen(cmd, stdout=log, stderr=log, env=env, start_new_session=True)
        self.pid = proc.pid
        pid_file, port_file = self._state(".pid"), self._state(".port")
        if pid_file and port_file:
            _write_private(pid_file, str(proc.pid))
            _write_private(port_file, str(self.port))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"moto server exited with status {proc.returncode}")
            if _answers(self.endpoint_url, self.access_key):
                return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"moto server did not answer on {self.endpoint_url} within {timeout}s")

    def _is_ours(self) -> bool:
        """Is self.pid still this server (not a zombie)? Pids are reused: never signal a stranger."""
        try:
            cmdline = psutil.Process(self.pid).cmdline()
        except psutil.Error:
            return False
        return "ct_fleet.cloud.moto_server" in cmdline and str(self.port) in cmdline

    def stop(self) -> None:
        if self.pid is None:
            return
        if not self._is_ours():
            try:
                os.waitpid(self.pid, os.WNOHANG)  # a server of ours that died: reap it
            except ChildProcessError:
                pass
            self.pid = None
            return
        # SIGKILL, not SIGTERM: moto keeps everything in memory, so there is nothing to save,
        # and Python's orderly exit of a process holding moto's models costs 0.6 s of CPU
        # and of wall time. Its log is written line by line: nothing is lost either.
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            os.waitpid(self.pid, 0)  # our child: reap it, or it lingers as a zombie while we run
        except ChildProcessError:  # an adopted server, another process's child: see it go
            deadline = time.monotonic() + 10
            while _alive(self.pid) and time.monotonic() < deadline:
                time.sleep(0.02)
        self.pid = None

    def __enter__(self) -> "MotoServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _holder(pid: int) -> str:
    """A lease's content: the holder's pid and start time (a pid alone may be reused)."""
    return f"{pid} {psutil.Process(pid).create_time()}"


def _holder_alive(lease: Path) -> bool:
    try:
        pid, started = lease.read_text().split()
        process = psutil.Process(int(pid))
        return abs(process.create_time() - float(started)) < 0.01 and process.status() != psutil.STATUS_ZOMBIE
    except (OSError, ValueError, psutil.Error):
        return False


def _watch_lease(lease: Path, timeout: int) -> None:
    """Exit once the lease's holder has been gone (and the lease untouched) for `timeout`."""
    held_at = time.time()
    while True:
        time.sleep(max(0.5, min(5, timeout / 4)))
        if _holder_alive(lease):
            held_at = time.time()
            continue
        try:
            touched = lease.stat().st_mtime
        except OSError:
            touched = 0.0
        idle = time.time() - max(held_at, touched)
        if idle > timeout:
            print(f"lease {lease}: its holder has been gone for {idle:.0f}s: {EXIT_WORDS}", flush=True)
            os._exit(0)


def main(argv: list[str] | None = None, environ: MutableMapping[str, str] | None = None) -> None:
    """The server process (`environ`: its environment, where a gated server's key is)."""
    environ = {} if environ is None else environ
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--lease", type=Path)
    parser.add_argument("--lease-timeout", type=int, default=DEFAULT_LEASE_TIMEOUT)
    args = parser.parse_args(argv)
    if args.lease:
        threading.Thread(target=_watch_lease, args=(args.lease, args.lease_timeout), daemon=True).start()
    _import_moto()
    key = environ.pop(KEY_VAR, "")
    if not key:
        from moto.server import main as moto_main

        moto_main(["-H", "127.0.0.1", "-p", str(args.port)])
        return
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
    from werkzeug.serving import run_simple

    environ["MOTO_PORT"] = str(args.port)  # moto's URLs (an SQS queue's) name the port
    app = DomainDispatcherApplication(create_backend_app)
    run_simple(
        "127.0.0.1", args.port, gate(app, key), threaded=True, use_reloader=False, request_handler=MotoRequestHandler
    )


def gate(app: Any, key: str) -> Any:
    """`app`, answering only requests made with `key`: signed with it (SigV4 or SigV2, in the
    Authorization header or a presigned URL's query) or naming it in KEY_HEADER (moto's
    own API: its data dump would hand out every SSM parameter)."""

    def gated(environ: dict[str, Any], start_response: Any) -> Any:
        if _made_with(environ, key):
            return app(environ, start_response)
        start_response("403 Forbidden", [("Content-Type", "text/plain")])
        return [b"this endpoint answers only its own fleet\n"]

    return gated


def _made_with(environ: dict[str, Any], key: str) -> bool:
    auth = environ.get("HTTP_AUTHORIZATION", "")
    if f"Credential={key}/" in auth or auth.startswith(f"AWS {key}:"):
        return True
    if environ.get("HTTP_" + KEY_HEADER.upper().replace("-", "_")) == key:
        return True
    query = urllib.parse.parse_qs(environ.get("QUERY_STRING", ""))
    credential = (query.get("X-Amz-Credential") or [""])[0]
    return credential.startswith(f"{key}/") or bool((query.get("AWSAccessKeyId") or [""])[0] == key)


# The services a fleet calls (cloud/, services/). moto imports a service's models on its
# first request: EC2's alone take 0.7 s of CPU.
SERVICES = ("ec2", "s3", "sqs", "ssm", "iam", "sts", "service-quotas")


def _import_moto() -> None:
    """Import moto's server and the fleet's services with the collector off, then freeze
    what was built: the collections that ran during those imports, and later ones walking
    moto's and botocore's long-lived models, were a fifth of a small run's server CPU
    (1.72 s -> 1.40 s for the smoke task file). Requests' garbage is still collected."""
    gc.disable()
    try:
        from moto.backends import get_backend
        from moto.server import main  # noqa: F401

        for service in SERVICES:
            get_backend(service)
    finally:
        gc.freeze()
        gc.enable()


if __name__ == "__main__":
    main(environ=os.environ)

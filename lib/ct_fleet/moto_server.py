"""A moto server on a free loopback port, run as its own process.

It is the embedded cloud's AWS: S3, SQS, EC2, SSM, STS and IAM over real HTTP, so boto3
and the AWS CLI talk to it exactly as they talk to AWS. It runs in a separate process so
that its CPU work (moto's SQS is linear in queue depth) does not share the controller's GIL.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

# moto accepts any credentials; these are placeholders, not secrets.
EMBEDDED_ACCESS_KEY = "ctfleetembedded"
EMBEDDED_SECRET_KEY = "ctfleetembedded"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class MotoServer:
    """Start with `start()`, stop with `stop()`; also a context manager."""

    port: int = 0
    log_path: Path | None = None
    _proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> "MotoServer":
        self.port = self.port or free_port()
        env = dict(os.environ)
        # ~1,300 default AMIs and their snapshots make every describe slow; we register our own.
        env.setdefault("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")
        log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=log,
            stderr=log,
            env=env,
            start_new_session=True,
        )
        if self.log_path:
            # Lets tests and a later controller tell whether this server is still alive.
            self.log_path.with_suffix(".pid").write_text(str(self._proc.pid))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"moto server exited with status {self._proc.returncode}")
            try:
                with urllib.request.urlopen(f"{self.endpoint_url}/moto-api/", timeout=1):
                    return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"moto server did not answer on {self.endpoint_url} within {timeout}s")

    def stop(self) -> None:
        if self._proc and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None

    def __enter__(self) -> "MotoServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

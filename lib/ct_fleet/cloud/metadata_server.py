"""A loopback stand-in for the instance metadata service, for the embedded cloud's instances.

One server per LocalInstanceRunner; instance i's endpoint is http://127.0.0.1:<port>/<i>,
under which the IMDSv2 paths the worker reads are served (worker/metadata.py): a token
for PUT latest/api/token, and each notice while its file exists in the instance's
directory. A test (or a person) gives an instance a notice by creating the file.

It is also the local instance's power button (not an IMDS path): POST local/power-off is
what the embedded cloud's `shutdown` shim sends, and the runner terminates the instance in
EC2, as EC2 does when an instance launched with shutdown behaviour "terminate" powers off.
The shim would otherwise start the AWS CLI for it (0.4 s of CPU per instance).
"""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

# The file in an instance's directory that stands for each notice.
NOTICE_FILES = {
    "latest/meta-data/spot/instance-action": "spot-interruption-notice",
    "latest/meta-data/events/recommendations/rebalance": "rebalance-recommendation",
}


POWER_OFF = "local/power-off"
INSTANCE_ID = re.compile(r"i-[0-9a-f]{8,17}")


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that went away before its answer (an instance killed while it powered
        # off: the run's end kills what is left of its instances) is not an error of ours;
        # socketserver would print its traceback into the controller's output.
        if isinstance(sys.exc_info()[1], ConnectionError | TimeoutError):
            return
        super().handle_error(request, client_address)


class MetadataServer:
    def __init__(self, instances_dir: Path, power_off: Callable[[str], bool] | None = None) -> None:
        self.dir = instances_dir
        server = _Server(("127.0.0.1", 0), _handler(instances_dir, power_off))
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)
        self._thread.start()

    def endpoint(self, instance_id: str) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/{instance_id}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _handler(instances_dir: Path, power_off: Callable[[str], bool] | None) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:  # stdlib's signature
            pass

        def _answer(self, status: int, body: bytes = b"") -> None:
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_PUT(self) -> None:
            _, _, path = self.path.lstrip("/").partition("/")
            self._answer(200, b"local-token") if path == "latest/api/token" else self._answer(404)

        def do_GET(self) -> None:
            instance, _, path = self.path.lstrip("/").partition("/")
            notice = NOTICE_FILES.get(path)
            if not INSTANCE_ID.fullmatch(instance):
                self._answer(404)
            elif not self.headers.get("X-aws-ec2-metadata-token"):
                self._answer(401)
            elif notice and (instances_dir / instance / notice).exists():
                at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                self._answer(200, json.dumps({"action": "terminate", "time": at, "noticeTime": at}).encode())
            else:
                self._answer(404)

        def do_POST(self) -> None:
            instance, _, path = self.path.lstrip("/").partition("/")
            if path != POWER_OFF or power_off is None or not INSTANCE_ID.fullmatch(instance):
                self._answer(404)
                return
            try:
                ours = power_off(instance)
            except Exception as exc:  # the shim falls back to the EC2 API itself
                self._answer(503, f"{type(exc).__name__}: {exc}".encode())
                return
            self._answer(200 if ours else 404)

    return Handler

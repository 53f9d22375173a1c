"""A fault-injecting HTTP proxy for a moto server.

Real boto3 and AWS CLI traffic goes through it (clients use it as their endpoint:
AWS_ENDPOINT_URL=http://127.0.0.1:<port>, `--endpoint-url` for the AWS CLI v1), and it
answers chosen API calls with the throttling or 5xx responses AWS really sends, so that
botocore's own retry logic handles them. Nothing in boto3 is patched.

    rules = [FaultRule("sqs:SendMessageBatch", "throttle", rate=1.0, limit=2)]
    with FaultProxy(moto.endpoint_url, rules) as proxy:
        boto3.client("sqs", endpoint_url=proxy.endpoint_url, ...)
        ...
        assert proxy.injected[("sqs:SendMessageBatch", "throttle", "before")] == 2

A rule's `when`:
- "before": the proxy answers with the fault without forwarding: the call did not happen.
- "after": the proxy forwards the call, discards moto's answer and sends the fault
  instead: the call DID happen, the client retries it, and non-idempotent calls
  (SendMessage, a conditional PutObject, ...) really happen twice.

Action names are "<service>:<Operation>" as in IAM policies ("sqs:SendMessage",
"s3:PutObject", "ec2:DescribeInstances"); a rule's action is an fnmatch pattern over
them ("sqs:*", "s3:*Object", "*").

Run as a process (when the code under test runs in other processes):

    python tests/testkit/faultproxy.py --upstream http://127.0.0.1:5000 --port 0 \
        --rule 'sqs:*:throttle:before:0.1' --rule 's3:PutObject:5xx:after:1.0:3' \
        --stats /tmp/stats.json

It prints its port on the first line of stdout and, on SIGTERM or SIGINT, writes a JSON
summary ({"injected": ..., "calls": ...}) to --stats (SIGUSR1 writes it without exiting).
`spawn_proxy()` does all of this for a test. A running proxy also answers, outside any
AWS namespace (S3 bucket names cannot contain "_"):
    GET  /__faultproxy__/stats   the summary
    PUT  /__faultproxy__/rules   replace the rules: a JSON list of FaultRule fields or rule specs
    POST /__faultproxy__/reset   zero the counters
These requests are not counted.
"""

from __future__ import annotations

import argparse
import collections
import fnmatch
import http.client
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import uuid
from dataclasses import asdict, dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

try:
    from testkit import ec2_answers
except ModuleNotFoundError:  # run as a script: its own folder is on sys.path
    import ec2_answers  # type: ignore[no-redef]

KINDS = ("throttle", "5xx", "capacity", "quota", "empty")  # capacity, quota: ec2_answers.py
# "empty": a JSON-protocol answer with no members (`{}`), as AWS sends when none has a value
# (GetQueueAttributes omits Attributes), and as moto does when it finds no AttributeNames.
WHENS = ("before", "after")
CONTROL_PREFIX = "/__faultproxy__/"

# Hop-by-hop headers (RFC 7230 6.1) are the proxy's own business on each side.
HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
}


@dataclass
class FaultRule:
    action: str  # fnmatch pattern over "<service>:<Operation>": "sqs:SendMessageBatch", "s3:*", "*"
    kind: str  # one of KINDS
    when: str = "before"  # "before": fault instead of forwarding; "after": forward, then fault
    rate: float = 0.1  # probability per matching request
    limit: int | None = None  # stop injecting after this many
    # For the answers of ec2_answers.py: which pools ("<type>@<subnet>") or quota codes,
    # which fleet market, the error code, the quota's value.
    match: str = "*"
    market: str = "*"
    code: str = "InsufficientInstanceCapacity"
    value: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"fault kind must be one of {KINDS}, not {self.kind!r}")
        if self.when not in WHENS:
            raise ValueError(f"fault 'when' must be one of {WHENS}, not {self.when!r}")
        if not 0.0 <= float(self.rate) <= 1.0:
            raise ValueError(f"fault rate must be in [0, 1], not {self.rate!r}")
        self.rate = float(self.rate)

    def matches(self, action: str) -> bool:
        return fnmatch.fnmatchcase(action, self.action)

    @classmethod
    def parse(cls, spec: str) -> "FaultRule":
        """`ACTION:KIND[:WHEN[:RATE[:LIMIT]]]`, e.g. 'sqs:*:throttle:before:0.1', '*:5xx:after:1:3'."""
        parts = spec.split(":")
        kind_at = next((i for i, part in enumerate(parts) if part in KINDS and i > 0), None)
        if kind_at is None:
            raise ValueError(f"bad fault rule {spec!r}: expected ACTION:KIND[:WHEN[:RATE[:LIMIT]]]")
        action, rest = ":".join(parts[:kind_at]), parts[kind_at + 1 :]
        if len(rest) > 3:
            raise ValueError(f"bad fault rule {spec!r}: too many fields")
        when = rest[0] if len(rest) > 0 and rest[0] else "before"
        rate = float(rest[1]) if len(rest) > 1 and rest[1] else 0.1
        limit = int(rest[2]) if len(rest) > 2 and rest[2] not in ("", "none", "None") else None
        return cls(action, parts[kind_at], when, rate, limit)

    @classmethod
    def coerce(cls, value: "FaultRule | str | dict[str, Any]") -> "FaultRule":
        if isinstance(value, FaultRule):
            return value
        if isinstance(value, str):
            return cls.parse(value)
        return cls(**value)


# --------------------------------------------------------------------------- action names

_SCOPE_RE = re.compile(r"Credential=[^/,\s]+/\d{8}/[^/,\s]+/([^/,\s]+)/aws4_request")
_QUERY_SCOPE_RE = re.compile(r"^[^/]+/\d{8}/[^/]+/([^/]+)/aws4_request$")
_TARGET_SERVICES = {"AmazonSQS": "sqs", "AmazonSSM": "ssm"}
# Virtual-host style S3: bucket.s3.amazonaws.com, bucket.s3.us-east-1.amazonaws.com, bucket.s3-us-west-2...
_S3_VHOST_RE = re.compile(r"^(?P<bucket>.+?)\.s3(?:[.-][^.]+)*\.amazonaws\.com$")

# Sub-resources that name a bucket operation: query key -> (GET, PUT, DELETE) operation suffix.
_S3_BUCKET_SUBRESOURCES = {
    "accelerate": "BucketAccelerateConfiguration",
    "acl": "BucketAcl",
    "analytics": "BucketAnalyticsConfiguration",
    "cors": "BucketCors",
    "encryption": "BucketEncryption",
    "intelligent-tiering": "BucketIntelligentTieringConfiguration",
    "inventory": "BucketInventoryConfiguration",
    "lifecycle": "BucketLifecycleConfiguration",
    "logging": "BucketLogging",
    "metrics": "BucketMetricsConfiguration",
    "notification": "BucketNotificationConfiguration",
    "object-lock": "ObjectLockConfiguration",
    "ownershipControls": "BucketOwnershipControls",
    "policy": "BucketPolicy",
    "policyStatus": "BucketPolicyStatus",
    "publicAccessBlock": "PublicAccessBlock",
    "replication": "BucketReplication",
    "requestPayment": "BucketRequestPayment",
    "tagging": "BucketTagging",
    "versioning": "BucketVersioning",
    "website": "BucketWebsite",
}
_S3_OBJECT_SUBRESOURCES = {
    "acl": "ObjectAcl",
    "legal-hold": "ObjectLegalHold",
    "retention": "ObjectRetention",
    "tagging": "ObjectTagging",
}


def _lower(headers: Any) -> dict[str, str]:
    """Header names in lower case (the last of repeated headers wins)."""
    return {str(k).lower(): v for k, v in headers.items()}


def service_of(headers: Any, query: dict[str, list[str]]) -> str | None:
    """The signing service from SigV4's credential scope (Authorization header or presigned URL)."""
    headers = _lower(headers)
    match = _SCOPE_RE.search(headers.get("authorization", "") or "")
    if match:
        return match.group(1)
    credential = (query.get("X-Amz-Credential") or [""])[0]
    match = _QUERY_SCOPE_RE.match(credential)
    if match:
        return match.group(1)
    target = headers.get("x-amz-target", "") or ""
    if target:
        return _TARGET_SERVICES.get(target.split(".", 1)[0])
    return None


def s3_operation(method: str, path: str, query: dict[str, list[str]], headers: Any) -> str:
    """The S3 REST operation a request stands for, from its method, path, query and headers."""
    method = method.upper()
    headers = _lower(headers)
    host = (headers.get("host", "") or "").rsplit(":", 1)[0].lower()
    segments = path.lstrip("/")
    vhost = _S3_VHOST_RE.match(host)
    if vhost:
        bucket, key = vhost.group("bucket"), segments
    else:
        bucket, _, key = segments.partition("/")
    if not bucket:
        return {"GET": "ListBuckets"}.get(method, f"Unknown{method.title()}")
    copy = "x-amz-copy-source" in headers
    if not key:
        if method == "HEAD":
            return "HeadBucket"
        if method == "POST":
            return "DeleteObjects" if "delete" in query else f"Unknown{method.title()}"
        if method == "GET":
            if "list-type" in query:
                return "ListObjectsV2"
            if "uploads" in query:
                return "ListMultipartUploads"
            if "versions" in query:
                return "ListObjectVersions"
            if "location" in query:
                return "GetBucketLocation"
        for sub, name in _S3_BUCKET_SUBRESOURCES.items():
            if sub in query:
                return {"GET": "Get", "PUT": "Put", "DELETE": "Delete"}.get(method, "Unknown") + name
        return {"GET": "ListObjects", "PUT": "CreateBucket", "DELETE": "DeleteBucket"}.get(
            method, f"Unknown{method.title()}"
        )
    if method == "POST":
        if "uploads" in query:
            return "CreateMultipartUpload"
        if "uploadId" in query:
            return "CompleteMultipartUpload"
        if "restore" in query:
            return "RestoreObject"
        if "select" in query:
            return "SelectObjectContent"
        return f"Unknown{method.title()}"
    if method == "PUT" and "uploadId" in query:
        return "UploadPartCopy" if copy else "UploadPart"
    if method == "GET" and "uploadId" in query:
        return "ListParts"
    if method == "DELETE" and "uploadId" in query:
        return "AbortMultipartUpload"
    if method == "GET" and "attributes" in query:
        return "GetObjectAttributes"
    for sub, name in _S3_OBJECT_SUBRESOURCES.items():
        if sub in query:
            return {"GET": "Get", "PUT": "Put", "DELETE": "Delete"}.get(method, "Unknown") + name
    if method == "PUT":
        return "CopyObject" if copy else "PutObject"
    return {"GET": "GetObject", "HEAD": "HeadObject", "DELETE": "DeleteObject"}.get(method, f"Unknown{method.title()}")


@dataclass
class RequestInfo:
    service: str  # "sqs", "s3", ... or "unknown"
    operation: str  # "SendMessage", "PutObject", ... or "Unknown"
    protocol: str  # "json" | "query" | "ec2" | "rest-xml" | "unknown"
    content_type: str = ""

    @property
    def action(self) -> str:
        return f"{self.service}:{self.operation}"


def classify(method: str, target: str, headers: Any, body: bytes) -> RequestInfo:
    """Name the AWS API call an HTTP request makes, the way AWS routes it."""
    parts = urlsplit(target)
    path = parts.path or "/"
    query = parse_qs(parts.query, keep_blank_values=True)
    headers = _lower(headers)
    if path.startswith("/moto-api"):  # moto's own API (reset, data): never faulted
        return RequestInfo("moto", "Api", "unknown")
    service = service_of(headers, query)
    content_type = headers.get("content-type", "") or ""
    amz_target = headers.get("x-amz-target", "") or ""
    if amz_target:  # JSON protocol (SQS in current botocore, SSM): X-Amz-Target: AmazonSQS.SendMessage
        return RequestInfo(service or "unknown", amz_target.rsplit(".", 1)[-1], "json", content_type)
    if service == "s3" or (service is None and "Action" not in query and method.upper() != "POST"):
        return RequestInfo("s3" if service is None else service, s3_operation(method, path, query, headers), "rest-xml")
    action = (query.get("Action") or [""])[0]
    if not action and "x-www-form-urlencoded" in content_type.lower() and body:
        form = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
        action = (form.get("Action") or [""])[0]
    if action:  # query protocol (EC2, IAM, STS, SQS in awscli v1 / older botocore)
        service = service or "unknown"
        return RequestInfo(service, action, "ec2" if service == "ec2" else "query", content_type)
    return RequestInfo(service or "unknown", "Unknown", "unknown", content_type)


# --------------------------------------------------------------------------- fault responses

_QUERY_NAMESPACES = {
    "sqs": "http://queue.amazonaws.com/doc/2012-11-05/",
    "iam": "https://iam.amazonaws.com/doc/2010-05-08/",
    "sts": "https://sts.amazonaws.com/doc/2011-06-15/",
}


@dataclass
class FaultResponse:
    status: int
    headers: list[tuple[str, str]]
    body: bytes


def fault_response(info: RequestInfo, kind: str, method: str = "POST") -> FaultResponse:
    """What AWS sends for throttling or an internal error on this kind of request.

    Every code here is in botocore's throttling list (retries/standard.py
    ThrottledRetryableChecker) or has a 5xx status (TransientRetryableChecker), and is
    also retried by the legacy mode's _retry.json.
    """
    request_id = str(uuid.uuid4())
    throttle = kind == "throttle"
    if info.protocol == "rest-xml" or info.service == "s3":
        status, code, message = (
            (503, "SlowDown", "Please reduce your request rate.")
            if throttle
            else (500, "InternalError", "We encountered an internal error. Please try again.")
        )
        host_id = uuid.uuid4().hex
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            f"<Error><Code>{code}</Code><Message>{message}</Message>"
            f"<RequestId>{request_id}</RequestId><HostId>{host_id}</HostId></Error>"
        ).encode()
        headers = [
            ("Content-Type", "application/xml"),
            ("x-amz-request-id", request_id),
            ("x-amz-id-2", host_id),
        ]
        # A HEAD answer has no body: botocore then goes by the status code alone, as with S3.
        return FaultResponse(status, headers, b"" if method.upper() == "HEAD" else body)
    if info.protocol == "json":
        content_type = info.content_type or "application/x-amz-json-1.0"
        headers = [("Content-Type", content_type), ("x-amzn-RequestId", request_id)]
        if throttle:
            if info.service == "sqs":
                # SQS speaks JSON but keeps its query-protocol error codes (awsQueryCompatible):
                # botocore takes the code from this header.
                payload = {"__type": "com.amazonaws.sqs#ThrottlingException", "message": "Rate exceeded"}
                headers.append(("x-amzn-query-error", "ThrottlingException;Sender"))
            else:
                payload = {"__type": "ThrottlingException", "message": "Rate exceeded"}
            status = 400
        else:
            payload = {"__type": "InternalFailure", "message": "We encountered an internal error. Please try again."}
            if info.service == "sqs":
                headers.append(("x-amzn-query-error", "InternalFailure;Receiver"))
            status = 500
        return FaultResponse(status, headers, json.dumps(payload).encode())
    if info.protocol == "ec2":
        status, code, message = (
            (503, "RequestLimitExceeded", "Request limit exceeded.")
            if throttle
            else (500, "InternalError", "An internal error has occurred")
        )
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            f"<Response><Errors><Error><Code>{code}</Code><Message>{message}</Message></Error></Errors>"
            f"<RequestID>{request_id}</RequestID></Response>"
        ).encode()
        return FaultResponse(status, [("Content-Type", "text/xml;charset=UTF-8")], body)
    # Query protocol (IAM, STS, SQS from older clients) and anything unrecognised.
    if throttle:
        status, err_type = 400, "Sender"
        code, message = (
            ("ThrottlingException", "Rate exceeded") if info.service == "sqs" else ("Throttling", "Rate exceeded")
        )
    else:
        status, err_type, code, message = (
            500,
            "Receiver",
            "InternalFailure",
            "We encountered an internal error. Please try again.",
        )
    namespace = _QUERY_NAMESPACES.get(info.service, "")
    xmlns = f' xmlns="{namespace}"' if namespace else ""
    body = (
        f"<ErrorResponse{xmlns}><Error><Type>{err_type}</Type><Code>{code}</Code>"
        f"<Message>{message}</Message></Error><RequestId>{request_id}</RequestId></ErrorResponse>"
    ).encode()
    if info.protocol == "unknown" and throttle:
        status = 503  # unknown protocol: at least a status every retry mode retries
    return FaultResponse(status, [("Content-Type", "text/xml"), ("x-amzn-RequestId", request_id)], body)


# --------------------------------------------------------------------------- the proxy


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256
    proxy: "FaultProxy"

    def process_request(self, request: Any, client_address: Any) -> None:
        self.proxy._track(request, add=True)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        self.proxy._track(request, add=False)
        super().shutdown_request(request)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: botocore pools connections
    disable_nagle_algorithm = True  # else small writes wait on delayed ACKs (~40 ms a call)
    server_version = "faultproxy"
    timeout = 300  # idle keep-alive connections end eventually
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # stdlib's signature
        if self.server.proxy.verbose:
            sys.stderr.write("faultproxy: " + (format % args) + "\n")

    def _read_body(self) -> bytes:
        if "chunked" in (self.headers.get("Transfer-Encoding", "") or "").lower():
            chunks = []
            while True:
                line = self.rfile.readline(65537)
                size = int(line.split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline(65537)  # CRLF after the chunk
            return b"".join(chunks)
        length = int(self.headers.get("Content-Length", "0") or "0")
        return self.rfile.read(length) if length > 0 else b""

    def _handle(self) -> None:
        proxy = self.server.proxy
        body = self._read_body()
        target = self.path
        if target.startswith(("http://", "https://")):  # absolute-form request target
            parts = urlsplit(target)
            target = parts.path + (f"?{parts.query}" if parts.query else "")
        if target.startswith(CONTROL_PREFIX):
            self._control(target[len(CONTROL_PREFIX) :].split("?", 1)[0], body)
            return
        info = classify(self.command, target, self.headers, body)
        rule = proxy._decide(info.action)
        if rule is not None and rule.kind in ("capacity", "quota"):
            self._answer(rule, target, body)
            return
        if rule is not None and rule.kind == "empty":
            self._send_plain(200, b"{}", "application/x-amz-json-1.0")
            return
        if rule is not None and rule.when == "before":
            self._send_fault(info, rule.kind)
            return
        try:
            status, reason, headers, chunks, finish = proxy._forward(self.command, target, self.headers, body)
        except Exception as exc:  # any upstream failure becomes a 502
            proxy._count_upstream_error()
            if proxy.verbose:
                sys.stderr.write(f"faultproxy: upstream error for {info.action}: {exc!r}\n")
            # A 502 in the body format of the protocol, so that clients parse and retry it.
            self._send_fault(info, "5xx", status=502)
            return
        if rule is not None:  # "after": the call happened; the client is told it failed
            for _ in chunks:
                pass
            finish()
            self._send_fault(info, rule.kind)
            return
        try:
            self._relay(status, reason, headers, chunks)
        finally:
            finish()

    def _answer(self, rule: FaultRule, target: str, body: bytes) -> None:
        """A capacity or quota answer (ec2_answers.py), or the call forwarded as it was."""
        proxy = self.server.proxy
        if rule.kind == "quota":
            answer = ec2_answers.quota(body, rule.match, rule.value)
            if answer is not None:
                self._send_plain(200, answer, "application/x-amz-json-1.1")
                return
            rewrite = None
        else:
            rewrite = ec2_answers.capacity(body, rule.match, rule.market, rule.code)
        if rewrite is not None and rewrite.body is None:
            self._send_plain(200, rewrite.answer, "text/xml;charset=UTF-8")
            return
        sent = body if rewrite is None or rewrite.body is None else rewrite.body
        status, reason, headers, chunks, finish = proxy._forward(self.command, target, self.headers, sent)
        try:
            if rewrite is None or status != 200:
                self._relay(status, reason, headers, chunks)
                return
            answer = ec2_answers.with_errors(b"".join(chunks), rewrite.errors)
            self._send_plain(200, answer, "text/xml;charset=UTF-8")
        finally:
            finish()

    def _relay(self, status: int, reason: str, headers: list[tuple[str, str]], chunks: Any) -> None:
        self.send_response_only(status, reason)
        has_length = False
        for name, value in headers:
            lname = name.lower()
            if lname in HOP_BY_HOP:
                continue
            has_length |= lname == "content-length"
            self.send_header(name, value)
        no_body = self.command == "HEAD" or status in (204, 304) or 100 <= status < 200
        chunked = not has_length and not no_body
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        if no_body:
            return
        for chunk in chunks:
            if not chunk:
                continue
            if chunked:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            else:
                self.wfile.write(chunk)
        if chunked:
            self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _send_fault(self, info: RequestInfo, kind: str, status: int | None = None) -> None:
        fault = fault_response(info, kind, self.command)
        self.send_response(status or fault.status)
        for name, value in fault.headers:
            self.send_header(name, value)
        if self.command == "HEAD":
            self.send_header("Content-Length", "0")
        else:
            self.send_header("Content-Length", str(len(fault.body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(fault.body)
        self.wfile.flush()

    def _send_plain(self, status: int, body: bytes, content_type: str = "text/plain") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        self.wfile.flush()

    def _control(self, what: str, body: bytes) -> None:
        proxy = self.server.proxy
        if what == "stats" and self.command == "GET":
            self._send_plain(200, json.dumps(proxy.stats()).encode(), "application/json")
        elif what == "rules" and self.command in ("PUT", "POST"):
            try:
                proxy.set_rules([FaultRule.coerce(r) for r in json.loads(body or b"[]")])
            except (ValueError, TypeError) as exc:
                self._send_plain(400, str(exc).encode())
                return
            self._send_plain(200, json.dumps([asdict(r) for r in proxy.rules]).encode(), "application/json")
        elif what == "rules" and self.command == "GET":
            self._send_plain(200, json.dumps([asdict(r) for r in proxy.rules]).encode(), "application/json")
        elif what == "reset" and self.command == "POST":
            proxy.reset()
            self._send_plain(200, b"{}", "application/json")
        else:
            self._send_plain(404, b"faultproxy: unknown control request")

    def handle_one_request(self) -> None:
        try:
            super().handle_one_request()
        except (ConnectionError, TimeoutError):
            self.close_connection = True

    def __getattr__(self, name: str) -> Any:
        if name.startswith("do_"):  # every method: GET, PUT, POST, HEAD, DELETE, PATCH, OPTIONS...
            return self._handle
        raise AttributeError(name)


class FaultProxy:
    """An HTTP proxy in front of `upstream` that injects the faults its rules ask for."""

    def __init__(
        self,
        upstream: str,
        rules: list[FaultRule] | None = None,
        seed: int = 0,
        port: int = 0,
        host: str = "127.0.0.1",
        rewrite_host: bool = False,
        upstream_timeout: float = 120.0,
        verbose: bool = False,
    ) -> None:
        parts = urlsplit(upstream)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"upstream must be an http:// URL, not {upstream!r}")
        self.upstream = upstream.rstrip("/")
        self._upstream_host = parts.hostname
        self._upstream_port = parts.port or 80
        # By default the client's Host header goes upstream unchanged: the SigV4 signature
        # covers it (moto checks signatures when its IAM auth is on), and the URLs moto puts
        # in answers (SQS QueueUrl, S3 Location) then point back through the proxy.
        self.rewrite_host = rewrite_host
        self.upstream_timeout = upstream_timeout
        self.verbose = verbose
        self.host = host
        self.port = port
        self.seed = seed
        self.injected: collections.Counter[tuple[str, str, str]] = collections.Counter()
        self.calls: collections.Counter[str] = collections.Counter()
        self.connections_accepted = 0
        self.upstream_errors = 0
        self.upstream_connections = 0
        self._lock = threading.Lock()
        self._random = random.Random(seed)
        self._rules: list[FaultRule] = []
        self._fired: list[int] = []
        self.set_rules(list(rules or []))
        self._pool: list[http.client.HTTPConnection] = []
        self._pool_max = 64
        self._clients: set[socket.socket] = set()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # ----- lifecycle

    @property
    def endpoint_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> "FaultProxy":
        if self._server is not None:
            return self
        server = _Server((self.host, self.port), _Handler)
        server.proxy = self
        self._server = server
        self.port = server.server_address[1]
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.1}, name=f"faultproxy:{self.port}", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        with self._lock:
            clients, self._clients = list(self._clients), set()
            pool, self._pool = self._pool, []
        for sock in clients:  # idle keep-alive connections would otherwise outlive the proxy
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for conn in pool:
            conn.close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> "FaultProxy":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ----- rules and counters

    @property
    def rules(self) -> list[FaultRule]:
        return list(self._rules)

    def set_rules(self, rules: list[FaultRule]) -> None:
        """Replace the rules (and their `limit` budgets); counters are kept."""
        rules = [FaultRule.coerce(r) for r in rules]
        with self._lock:
            self._rules = rules
            self._fired = [0] * len(rules)

    def reset(self) -> None:
        """Zero the counters and the rules' `limit` budgets."""
        with self._lock:
            self.injected.clear()
            self.calls.clear()
            self._fired = [0] * len(self._rules)
            self._random = random.Random(self.seed)

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {
                "port": self.port,
                "injected": {f"{a}:{k}:{w}": n for (a, k, w), n in sorted(self.injected.items())},
                "calls": dict(sorted(self.calls.items())),
                "connections_accepted": self.connections_accepted,
                "upstream_errors": self.upstream_errors,
                "upstream_connections": self.upstream_connections,
            }

    def _decide(self, action: str) -> FaultRule | None:
        with self._lock:
            self.calls[action] += 1
            if action == "moto:Api":
                return None
            for i, rule in enumerate(self._rules):
                if not rule.matches(action):
                    continue
                if rule.limit is not None and self._fired[i] >= rule.limit:
                    continue
                if self._random.random() < rule.rate:
                    self._fired[i] += 1
                    self.injected[(action, rule.kind, rule.when)] += 1
                    return rule
            return None

    def _count_upstream_error(self) -> None:
        with self._lock:
            self.upstream_errors += 1

    def _track(self, sock: socket.socket, add: bool) -> None:
        with self._lock:
            if add:
                self._clients.add(sock)
                self.connections_accepted += 1
            else:
                self._clients.discard(sock)

    # ----- forwarding

    def _connection(self) -> tuple[http.client.HTTPConnection, bool]:
        with self._lock:
            if self._pool:
                return self._pool.pop(), True
        conn = http.client.HTTPConnection(self._upstream_host, self._upstream_port, timeout=self.upstream_timeout)
        with self._lock:
            self.upstream_connections += 1
        return conn, False

    def _release(self, conn: http.client.HTTPConnection, reusable: bool) -> None:
        if reusable and self._server is not None:
            with self._lock:
                if len(self._pool) < self._pool_max:
                    self._pool.append(conn)
                    return
        conn.close()

    def _forward(
        self, method: str, target: str, headers: Any, body: bytes
    ) -> tuple[int, str, list[tuple[str, str]], Any, Any]:
        """Send the request upstream; returns status, reason, headers, a chunk iterator and a finisher."""
        out: list[tuple[str, str]] = []
        for name, value in headers.items():
            lname = name.lower()
            if lname in HOP_BY_HOP or lname in ("content-length", "expect"):
                continue
            if lname == "host" and self.rewrite_host:
                value = f"{self._upstream_host}:{self._upstream_port}"
            out.append((name, value))
        if not any(name.lower() == "host" for name, _ in out):
            out.append(("Host", f"{self._upstream_host}:{self._upstream_port}"))
        if (
            body
            or method.upper() in ("POST", "PUT", "PATCH")
            or "content-length" in {k.lower() for k in headers.keys()}
        ):
            out.append(("Content-Length", str(len(body))))
        for attempt in range(2):
            conn, reused = self._connection()
            try:
                conn.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
                for name, value in out:
                    conn.putheader(name, value)
                conn.endheaders(body or None)
                resp = conn.getresponse()
                break
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                conn.close()
                # A pooled connection the server had already closed: nothing reached it; try a fresh one.
                if reused and attempt == 0:
                    continue
                raise
            except BaseException:
                conn.close()
                raise

        def chunks() -> Any:
            while True:
                chunk = resp.read1(65536) if hasattr(resp, "read1") else resp.read(65536)
                if not chunk:
                    return
                yield chunk

        def finish() -> None:
            try:
                complete = resp.isclosed() or not resp.read(1)
            except Exception:
                complete = False
            self._release(conn, complete and not resp.will_close)

        return resp.status, resp.reason, list(resp.getheaders()), chunks(), finish


# --------------------------------------------------------------------------- as a process


def load_stats(path: str | os.PathLike[str]) -> tuple[collections.Counter, collections.Counter]:
    """(injected, calls) Counters from a --stats file, keyed as FaultProxy's are."""
    data = json.loads(Path(path).read_text())
    return _counters(data)


def _counters(data: dict[str, Any]) -> tuple[collections.Counter, collections.Counter]:
    injected: collections.Counter = collections.Counter()
    for key, count in data.get("injected", {}).items():
        action, kind, when = key.rsplit(":", 2)
        injected[(action, kind, when)] = count
    return injected, collections.Counter(data.get("calls", {}))


class ProxyProcess:
    """A faultproxy running as a subprocess (see `spawn_proxy`)."""

    def __init__(self, proc: subprocess.Popen[str], port: int, stats_path: Path) -> None:
        self.proc = proc
        self.port = port
        self.stats_path = stats_path
        self.injected: collections.Counter = collections.Counter()
        self.calls: collections.Counter = collections.Counter()

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stats(self) -> dict[str, Any]:
        """The live summary, asked over HTTP."""
        import urllib.request

        with urllib.request.urlopen(f"{self.endpoint_url}{CONTROL_PREFIX}stats", timeout=10) as resp:
            data = json.loads(resp.read())
        self.injected, self.calls = _counters(data)
        return data

    def set_rules(self, rules: list[FaultRule | str]) -> None:
        import urllib.request

        payload = json.dumps([asdict(FaultRule.coerce(r)) for r in rules]).encode()
        req = urllib.request.Request(f"{self.endpoint_url}{CONTROL_PREFIX}rules", data=payload, method="PUT")
        with urllib.request.urlopen(req, timeout=10):
            pass

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, wait, and load the final counters from the stats file."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.stats_path.exists():
            self.injected, self.calls = load_stats(self.stats_path)

    def __enter__(self) -> "ProxyProcess":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def spawn_proxy(
    upstream: str,
    rules: list[FaultRule | str] | None = None,
    stats_path: str | os.PathLike[str] | None = None,
    seed: int = 0,
    port: int = 0,
    timeout: float = 15.0,
) -> ProxyProcess:
    """Start `python tests/testkit/faultproxy.py` as a subprocess and wait until it listens."""
    import tempfile

    stats = Path(stats_path) if stats_path else Path(tempfile.mkdtemp(prefix="faultproxy-")) / "stats.json"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--upstream", upstream, "--port", str(port)]
    cmd += ["--seed", str(seed), "--stats", str(stats)]
    for rule in rules or []:
        cmd += ["--rule", json.dumps(asdict(FaultRule.coerce(rule)))]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stdout is not None
    ready: list[str] = []
    first = threading.Event()

    def read() -> None:  # the port, then drain stdout so the proxy never blocks on it
        for line in proc.stdout:  # type: ignore[union-attr]
            ready.append(line)
            first.set()
        first.set()

    threading.Thread(target=read, daemon=True).start()
    first.wait(timeout)
    if not ready or not ready[0].strip().isdigit():
        proc.kill()
        proc.wait()
        raise RuntimeError(f"faultproxy did not start: {ready!r}, exit status {proc.poll()}")
    return ProxyProcess(proc, int(ready[0]), stats)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Fault-injecting HTTP proxy in front of a moto server.")
    parser.add_argument("--upstream", required=True, help="the moto server, e.g. http://127.0.0.1:5000")
    parser.add_argument("--port", type=int, default=0, help="port to listen on (0: any free port)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument(
        "--rule",
        action="append",
        default=[],
        metavar="ACTION:KIND[:WHEN[:RATE[:LIMIT]]] or a JSON rule",
        help="e.g. 'sqs:*:throttle:before:0.1', 's3:PutObject:5xx:after:1.0:3', '{\"action\": ...}' (repeatable)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--stats", help="write the JSON summary here on SIGTERM/SIGINT/SIGUSR1 and at exit")
    parser.add_argument("--rewrite-host", action="store_true", help="send Host: <upstream host:port> upstream")
    parser.add_argument("--verbose", action="store_true", help="log every request to stderr")
    args = parser.parse_args(argv)

    proxy = FaultProxy(
        args.upstream,
        [FaultRule(**json.loads(spec)) if spec.startswith("{") else FaultRule.parse(spec) for spec in args.rule],
        seed=args.seed,
        port=args.port,
        host=args.host,
        rewrite_host=args.rewrite_host,
        verbose=args.verbose,
    ).start()
    done = threading.Event()

    def write_stats() -> None:
        if args.stats:
            tmp = Path(args.stats).with_name(Path(args.stats).name + ".tmp")
            tmp.write_text(json.dumps(proxy.stats(), indent=1) + "\n")
            os.replace(tmp, args.stats)

    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    if hasattr(signal, "SIGUSR1"):
        signal.signal(signal.SIGUSR1, lambda *_: write_stats())
    print(proxy.port, flush=True)
    while not done.wait(0.5):
        pass
    proxy.stop()
    write_stats()
    print(json.dumps(proxy.stats()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

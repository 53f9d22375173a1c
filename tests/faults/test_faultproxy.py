"""The fault-injecting proxy: real boto3 and AWS CLI v1 traffic through it to a moto server.

Each fault must be one botocore really retries (standard, adaptive and legacy modes), the
"after" faults must really duplicate non-idempotent calls, and the action names must be
the ones AWS routes by.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from email.message import Message
from pathlib import Path
from typing import Any

import boto3
import pytest
from boto3.s3.transfer import TransferConfig
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials
from botocore.exceptions import ClientError
from botocore.model import ServiceModel
from botocore.parsers import create_parser
from botocore.retries.standard import RetryContext, RetryEventAdapter, ThrottlingErrorDetector

from ct_fleet.cloud.moto_server import EMBEDDED_ACCESS_KEY, EMBEDDED_SECRET_KEY
from testkit.faultproxy import FaultProxy, FaultRule, classify, load_stats, spawn_proxy

REGION = "us-east-1"
AWS_CLI = str(Path(sys.executable).with_name("aws"))
THROTTLE_DETECTOR = ThrottlingErrorDetector(RetryEventAdapter())


def _uid() -> str:
    return uuid.uuid4().hex[:10]


@pytest.fixture
def proxy(moto_server, aws_env) -> Iterator[FaultProxy]:
    with FaultProxy(moto_server.endpoint_url) as p:
        yield p


def _client(endpoint: str, service: str, mode: str = "standard", attempts: int = 3):
    """`attempts` counts every attempt. NB: Config's retries "max_attempts" counts only the
    retries (max_attempts=1 is two attempts); AWS_MAX_ATTEMPTS counts every attempt."""
    return boto3.client(
        service,
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id=EMBEDDED_ACCESS_KEY,
        aws_secret_access_key=EMBEDDED_SECRET_KEY,
        config=Config(retries={"mode": mode, "total_max_attempts": attempts}),
    )


# --------------------------------------------------------------------------- real boto3 calls


class Calls:
    """One real boto3 call per action, against resources made directly on moto (no faults)."""

    ACTIONS = (
        "sqs:SendMessage", "sqs:SendMessageBatch", "sqs:ReceiveMessage", "sqs:DeleteMessageBatch",
        "s3:PutObject", "s3:GetObject", "s3:HeadObject", "s3:ListObjectsV2", "ssm:PutParameter",
        "ssm:GetParameter", "ec2:DescribeInstances", "sts:GetCallerIdentity", "iam:ListRoles",
    )  # fmt: skip

    def __init__(self, moto_url: str) -> None:
        direct = lambda svc: _client(moto_url, svc, attempts=1)  # noqa: E731
        sqs, s3, ssm = direct("sqs"), direct("s3"), direct("ssm")
        uid = _uid()
        self.bucket = f"fp-{uid}"
        s3.create_bucket(Bucket=self.bucket)
        s3.put_object(Bucket=self.bucket, Key="seed.txt", Body=b"seed")
        self.queue = sqs.create_queue(QueueName=f"fp-{uid}")["QueueUrl"]
        self.recv_queue = sqs.create_queue(QueueName=f"fp-recv-{uid}")["QueueUrl"]
        self.del_queue = sqs.create_queue(QueueName=f"fp-del-{uid}")["QueueUrl"]
        sqs.send_message(QueueUrl=self.recv_queue, MessageBody="to-receive")
        sqs.send_message_batch(
            QueueUrl=self.del_queue, Entries=[{"Id": str(i), "MessageBody": f"d{i}"} for i in range(3)]
        )
        got = sqs.receive_message(QueueUrl=self.del_queue, MaxNumberOfMessages=10)["Messages"]
        self.handles = [m["ReceiptHandle"] for m in got]
        self.param = f"/fp/{uid}/p"
        ssm.put_parameter(Name=self.param, Value="v", Type="String")

    def table(self) -> dict[str, Callable[[Callable[[str], Any]], Any]]:
        """action -> fn(client_factory): make the call, return something checkable."""
        b, q = self.bucket, self.queue
        return {
            "sqs:SendMessage": lambda c: c("sqs").send_message(QueueUrl=q, MessageBody="one")["MessageId"],
            "sqs:SendMessageBatch": lambda c: c("sqs").send_message_batch(
                QueueUrl=q, Entries=[{"Id": str(i), "MessageBody": f"m{i}"} for i in range(3)]
            )["Successful"],
            "sqs:ReceiveMessage": lambda c: c("sqs").receive_message(
                QueueUrl=self.recv_queue, MaxNumberOfMessages=10, VisibilityTimeout=0
            )["Messages"],
            "sqs:DeleteMessageBatch": lambda c: c("sqs").delete_message_batch(
                QueueUrl=self.del_queue,
                Entries=[{"Id": str(i), "ReceiptHandle": h} for i, h in enumerate(self.handles)],
            )["Successful"],
            "s3:PutObject": lambda c: c("s3").put_object(Bucket=b, Key=f"put/{_uid()}", Body=b"x" * 2048)["ETag"],
            "s3:GetObject": lambda c: c("s3").get_object(Bucket=b, Key="seed.txt")["Body"].read() == b"seed",
            "s3:HeadObject": lambda c: c("s3").head_object(Bucket=b, Key="seed.txt")["ContentLength"] == 4,
            "s3:ListObjectsV2": lambda c: c("s3").list_objects_v2(Bucket=b)["KeyCount"],
            "ssm:PutParameter": lambda c: c("ssm").put_parameter(
                Name=f"{self.param}-{_uid()}", Value="v", Type="String"
            )["Version"],
            "ssm:GetParameter": lambda c: c("ssm").get_parameter(Name=self.param)["Parameter"]["Value"] == "v",
            "ec2:DescribeInstances": lambda c: "Reservations" in c("ec2").describe_instances(),
            "sts:GetCallerIdentity": lambda c: c("sts").get_caller_identity()["Account"],
            "iam:ListRoles": lambda c: "Roles" in c("iam").list_roles(),
        }


EXPECTED_CODES = {  # (action, kind) -> the error code botocore reports once retries run out
    "throttle": {
        "sqs": "ThrottlingException",
        "s3": "SlowDown",
        "s3:HeadObject": "503",  # a HEAD answer has no body: the code is the status
        "ssm": "ThrottlingException",
        "ec2": "RequestLimitExceeded",
        "sts": "Throttling",
        "iam": "Throttling",
    },
    "5xx": {
        "sqs": "InternalFailure",
        "s3": "InternalError",
        "s3:HeadObject": "500",
        "ssm": "InternalFailure",
        "ec2": "InternalError",
        "sts": "InternalFailure",
        "iam": "InternalFailure",
    },
}


def _expected_code(action: str, kind: str) -> str:
    codes = EXPECTED_CODES[kind]
    return codes.get(action, codes[action.split(":")[0]])


def _run_all(jobs: dict[Any, Callable[[], Any]]) -> dict[Any, Any]:
    """Run the jobs concurrently (retry back-off sleeps overlap); exceptions are returned."""

    def safe(fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except Exception as exc:
            return exc

    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        futures = {name: pool.submit(safe, fn) for name, fn in jobs.items()}
        return {name: f.result() for name, f in futures.items()}


# One call per service and protocol is enough to show the other retry modes handle each fault.
PER_SERVICE = ["sqs:SendMessageBatch", "s3:PutObject", "s3:HeadObject", "ssm:GetParameter",
               "ec2:DescribeInstances", "sts:GetCallerIdentity"]  # fmt: skip


def test_botocore_retries_every_fault_and_succeeds(moto_server, aws_env):
    """rate=1, limit=2: with 3 attempts every call succeeds on its last one, in every retry mode.

    Modes and fault kinds each get their own proxy, and all calls run at once so that
    botocore's back-off sleeps overlap.
    """
    cases = {  # (mode, kind) -> actions
        (mode, kind): (list(Calls.ACTIONS) if mode == "standard" else PER_SERVICE)
        for mode in ("standard", "adaptive", "legacy")
        for kind in ("throttle", "5xx")
    }
    proxies = {case: FaultProxy(moto_server.endpoint_url).start() for case in cases}
    try:
        jobs = {}
        for (mode, kind), actions in cases.items():
            p, table = proxies[(mode, kind)], Calls(moto_server.endpoint_url).table()
            p.set_rules([FaultRule(action, kind, "before", rate=1.0, limit=2) for action in actions])
            for action in actions:
                # One client per call: a client's retry quota and adaptive rate are its own.
                jobs[(mode, kind, action)] = lambda call=table[action], url=p.endpoint_url, mode=mode: call(
                    lambda svc: _client(url, svc, mode, attempts=3)
                )
        results = _run_all(jobs)
        failed = {job: repr(r) for job, r in results.items() if isinstance(r, Exception) or not r}
        assert not failed
        for (mode, kind), actions in cases.items():
            p = proxies[(mode, kind)]
            for action in actions:
                assert p.injected[(action, kind, "before")] == 2, (mode, kind, action, p.injected)
                assert p.calls[action] == 3, (mode, kind, action, p.calls)
    finally:
        for p in proxies.values():
            p.stop()


@pytest.mark.parametrize("kind", ["throttle", "5xx"])
def test_without_retries_the_fault_surfaces_with_the_aws_error_code(moto_server, aws_env, kind):
    calls = Calls(moto_server.endpoint_url).table()
    with FaultProxy(moto_server.endpoint_url, [FaultRule("*", kind, "before", rate=1.0)]) as p:
        results = _run_all(
            {
                action: (lambda call=call: call(lambda svc: _client(p.endpoint_url, svc, "standard", attempts=1)))
                for action, call in calls.items()
            }
        )
        for action, result in results.items():
            assert isinstance(result, ClientError), (action, result)
            err = result.response
            assert err["Error"]["Code"] == _expected_code(action, kind), (action, err)
            status = err["ResponseMetadata"]["HTTPStatusCode"]
            context = RetryContext(attempt_number=1, parsed_response=err)
            if kind == "throttle":
                assert status in (400, 503), (action, status)
                if action != "s3:HeadObject":  # what adaptive mode's rate limiter keys on
                    assert THROTTLE_DETECTOR.is_throttling_error_from_context(context), (action, err)
            else:
                assert status == 500, (action, status)
                assert not THROTTLE_DETECTOR.is_throttling_error_from_context(context)
            assert p.calls[action] == 1, (action, p.calls)
        assert sum(p.injected.values()) == len(calls)


def test_rate_and_limit_are_honoured_and_seeded(moto_server, aws_env):
    def run(seed: int) -> tuple[int, int]:
        with FaultProxy(moto_server.endpoint_url, [FaultRule("sts:*", "5xx", rate=0.3)], seed=seed) as p:
            sts = _client(p.endpoint_url, "sts", attempts=1)
            failures = 0
            for _ in range(40):
                try:
                    sts.get_caller_identity()
                except ClientError:
                    failures += 1
            assert p.injected[("sts:GetCallerIdentity", "5xx", "before")] == failures
            assert p.calls["sts:GetCallerIdentity"] == 40
            return failures, sum(p.injected.values())

    first = run(7)
    assert 4 <= first[0] <= 22  # ~12 expected
    assert run(7) == first  # same seed, same faults

    with FaultProxy(
        moto_server.endpoint_url,
        [FaultRule("sts:GetCallerIdentity", "throttle", rate=1.0, limit=3), FaultRule("*", "5xx", rate=0.0)],
    ) as p:
        sts = _client(p.endpoint_url, "sts", attempts=1)
        outcomes = []
        for _ in range(5):
            try:
                sts.get_caller_identity()
                outcomes.append("ok")
            except ClientError as exc:
                outcomes.append(exc.response["Error"]["Code"])
        assert outcomes == ["Throttling"] * 3 + ["ok"] * 2
        assert p.injected == {("sts:GetCallerIdentity", "throttle", "before"): 3}


def test_config_max_attempts_counts_retries_not_attempts(moto_server, aws_env):
    """botocore's Config(retries={"max_attempts": 1}) still retries once (total_max_attempts and
    AWS_MAX_ATTEMPTS count every attempt): "fail fast" needs total_max_attempts=1."""
    with FaultProxy(moto_server.endpoint_url, [FaultRule("sts:*", "5xx", rate=1.0, limit=1)]) as p:
        sts = boto3.client(
            "sts",
            endpoint_url=p.endpoint_url,
            region_name=REGION,
            config=Config(retries={"mode": "standard", "max_attempts": 1}),
        )
        sts.get_caller_identity()
        assert p.calls["sts:GetCallerIdentity"] == 2


# --------------------------------------------------------------------------- "after": real duplicates


def test_after_faults_make_real_duplicates_and_before_faults_do_not(moto_server, aws_env):
    direct_sqs = _client(moto_server.endpoint_url, "sqs", attempts=1)
    queues = {name: direct_sqs.create_queue(QueueName=f"fp-{name}-{_uid()}")["QueueUrl"] for name in ("a", "b", "c")}

    def depth(url: str) -> int:
        attrs = direct_sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])
        return int(attrs["Attributes"]["ApproximateNumberOfMessages"])

    rules = [
        FaultRule("sqs:SendMessage", "5xx", "after", rate=1.0, limit=1),
        FaultRule("sqs:SendMessageBatch", "throttle", "after", rate=1.0, limit=1),
    ]
    with FaultProxy(moto_server.endpoint_url, rules) as p:
        sqs = _client(p.endpoint_url, "sqs", "standard", attempts=3)
        sqs.send_message(QueueUrl=queues["a"], MessageBody="exactly-once?")  # succeeds for the caller
        sqs.send_message_batch(
            QueueUrl=queues["b"], Entries=[{"Id": "0", "MessageBody": "x"}, {"Id": "1", "MessageBody": "y"}]
        )
        assert p.injected == {("sqs:SendMessage", "5xx", "after"): 1, ("sqs:SendMessageBatch", "throttle", "after"): 1}
    assert depth(queues["a"]) == 2  # the faulted attempt DID happen, and so did the retry
    bodies = [m["Body"] for m in direct_sqs.receive_message(QueueUrl=queues["a"], MaxNumberOfMessages=10)["Messages"]]
    assert bodies == ["exactly-once?", "exactly-once?"]
    assert depth(queues["b"]) == 4

    with FaultProxy(moto_server.endpoint_url, [FaultRule("sqs:SendMessage", "5xx", "before", 1.0, 1)]) as p:
        _client(p.endpoint_url, "sqs", attempts=3).send_message(QueueUrl=queues["c"], MessageBody="once")
        assert p.injected[("sqs:SendMessage", "5xx", "before")] == 1
    assert depth(queues["c"]) == 1


def test_after_fault_on_a_conditional_put_turns_success_into_a_conflict(moto_server, aws_env):
    """A write that happened but was reported failed: the retry of a create-if-absent finds it there."""
    s3_direct = _client(moto_server.endpoint_url, "s3", attempts=1)
    bucket = f"fp-{_uid()}"
    s3_direct.create_bucket(Bucket=bucket)
    with FaultProxy(moto_server.endpoint_url, [FaultRule("s3:PutObject", "5xx", "after", 1.0, 1)]) as p:
        s3 = _client(p.endpoint_url, "s3", "standard", attempts=3)
        with pytest.raises(ClientError) as err:
            s3.put_object(Bucket=bucket, Key="result.eval", Body=b"mine", IfNoneMatch="*")
        assert err.value.response["Error"]["Code"] == "PreconditionFailed"
        assert p.calls["s3:PutObject"] == 2
    assert s3_direct.get_object(Bucket=bucket, Key="result.eval")["Body"].read() == b"mine"


# --------------------------------------------------------------------------- the AWS CLI v1


def _cli(endpoint: str, args: list[str], env: dict[str, str], **extra: str) -> subprocess.Popen[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    full_env.update(env)
    full_env.pop("AWS_ENDPOINT_URL", None)  # the CLI v1 needs --endpoint-url anyway
    full_env.update(extra)
    return subprocess.Popen(
        [AWS_CLI, "--endpoint-url", endpoint, "--region", REGION, *args],
        env=full_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_aws_cli_retries_through_the_proxy(moto_server, aws_env, tmp_path: Path):
    s3_direct = _client(moto_server.endpoint_url, "s3", attempts=1)
    sqs_direct = _client(moto_server.endpoint_url, "sqs", attempts=1)
    bucket = f"fp-{_uid()}"
    s3_direct.create_bucket(Bucket=bucket)
    queue = sqs_direct.create_queue(QueueName=f"fp-cli-{_uid()}")["QueueUrl"]
    src = tmp_path / "result.eval"
    src.write_bytes(b"payload" * 100)

    scenarios = {  # name -> (rule, args, env, should succeed)
        "s3 cp standard": (
            FaultRule("s3:PutObject", "throttle", "before", 1.0, 2),
            ["s3", "cp", str(src), f"s3://{bucket}/std.eval"],
            {"AWS_RETRY_MODE": "standard", "AWS_MAX_ATTEMPTS": "3"},
            True,
        ),
        "sqs send legacy (the CLI's default mode)": (
            FaultRule("sqs:SendMessage", "5xx", "before", 1.0, 2),
            ["sqs", "send-message", "--queue-url", queue, "--message-body", "legacy"],
            {},
            True,
        ),
        "sqs send adaptive": (
            FaultRule("sqs:SendMessage", "throttle", "before", 1.0, 2),
            ["sqs", "send-message", "--queue-url", queue, "--message-body", "adaptive"],
            {"AWS_RETRY_MODE": "adaptive", "AWS_MAX_ATTEMPTS": "3"},
            True,
        ),
        "s3 cp no retries": (
            FaultRule("s3:PutObject", "throttle", "before", 1.0),
            ["s3", "cp", str(src), f"s3://{bucket}/never.eval"],
            {"AWS_RETRY_MODE": "standard", "AWS_MAX_ATTEMPTS": "1"},
            False,
        ),
    }
    proxies = {name: FaultProxy(moto_server.endpoint_url, [rule]).start() for name, (rule, *_rest) in scenarios.items()}
    try:
        procs = {
            name: _cli(proxies[name].endpoint_url, args, aws_env, **env)
            for name, (_, args, env, _ok) in scenarios.items()
        }
        outputs = {name: (proc.wait(timeout=60), *proc.communicate()) for name, proc in procs.items()}
        for name, (rule, _args, _env, ok) in scenarios.items():
            rc, out, err = outputs[name]
            injected = proxies[name].injected[(rule.action, rule.kind, rule.when)]
            if ok:
                assert rc == 0, (name, out, err)
                assert injected == 2, (name, proxies[name].injected)
            else:
                assert rc != 0, (name, out, err)
                assert injected == 1, (name, proxies[name].injected)
                assert "SlowDown" in err, (name, err)
    finally:
        for p in proxies.values():
            p.stop()
    keys = {o["Key"] for o in s3_direct.list_objects_v2(Bucket=bucket).get("Contents", [])}
    assert keys == {"std.eval"}
    attrs = sqs_direct.get_queue_attributes(QueueUrl=queue, AttributeNames=["ApproximateNumberOfMessages"])
    assert attrs["Attributes"]["ApproximateNumberOfMessages"] == "2"


# --------------------------------------------------------------------------- action names


def _headers(service: str | None = None, host: str = "127.0.0.1:4566", **extra: str) -> Message:
    msg = Message()  # what http.server hands a handler: case-insensitive
    msg["Host"] = host
    if service:
        msg["Authorization"] = (
            f"AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20250101/us-east-1/{service}/aws4_request, "
            "SignedHeaders=host;x-amz-date, Signature=abc"
        )
    for name, value in extra.items():
        msg[name.replace("_", "-")] = value
    return msg


FORM = "application/x-www-form-urlencoded; charset=utf-8"

PARSE_CASES = [
    # SQS, JSON protocol (botocore >= 1.31.x) and query protocol (older botocore / awscli)
    (
        "POST",
        "/",
        _headers("sqs", X_Amz_Target="AmazonSQS.SendMessage", Content_Type="application/x-amz-json-1.0"),
        b"{}",
        "sqs:SendMessage",
    ),
    ("POST", "/", _headers("sqs", X_Amz_Target="AmazonSQS.DeleteMessageBatch"), b"{}", "sqs:DeleteMessageBatch"),
    (
        "POST",
        "/",
        _headers("sqs", Content_Type=FORM),
        b"Action=SendMessage&QueueUrl=x&MessageBody=hi&Version=2012-11-05",
        "sqs:SendMessage",
    ),
    (
        "POST",
        "/123456789012/q",
        _headers("sqs", Content_Type=FORM),
        b"Action=ReceiveMessage&Version=2012-11-05",
        "sqs:ReceiveMessage",
    ),
    ("POST", "/", _headers(None, X_Amz_Target="AmazonSQS.ReceiveMessage"), b"{}", "sqs:ReceiveMessage"),
    # SSM (JSON), EC2/IAM/STS (query)
    (
        "POST",
        "/",
        _headers("ssm", X_Amz_Target="AmazonSSM.GetParameter", Content_Type="application/x-amz-json-1.1"),
        b"{}",
        "ssm:GetParameter",
    ),
    (
        "POST",
        "/",
        _headers("ec2", Content_Type=FORM),
        b"Action=RunInstances&Version=2016-11-15&ImageId=ami-1",
        "ec2:RunInstances",
    ),
    ("GET", "/?Action=DescribeInstances&Version=2016-11-15", _headers("ec2"), b"", "ec2:DescribeInstances"),
    ("POST", "/", _headers("iam", Content_Type=FORM), b"Action=GetRole&RoleName=r&Version=2010-05-08", "iam:GetRole"),
    (
        "POST",
        "/",
        _headers("sts", Content_Type=FORM),
        b"Action=GetCallerIdentity&Version=2011-06-15",
        "sts:GetCallerIdentity",
    ),
    # S3 REST, path style
    ("GET", "/", _headers("s3"), b"", "s3:ListBuckets"),
    ("PUT", "/bkt", _headers("s3"), b"", "s3:CreateBucket"),
    ("HEAD", "/bkt", _headers("s3"), b"", "s3:HeadBucket"),
    ("DELETE", "/bkt", _headers("s3"), b"", "s3:DeleteBucket"),
    ("GET", "/bkt?list-type=2&prefix=a%2F", _headers("s3"), b"", "s3:ListObjectsV2"),
    ("GET", "/bkt?prefix=a", _headers("s3"), b"", "s3:ListObjects"),
    ("GET", "/bkt?location", _headers("s3"), b"", "s3:GetBucketLocation"),
    ("PUT", "/bkt?versioning", _headers("s3"), b"<x/>", "s3:PutBucketVersioning"),
    ("GET", "/bkt?uploads", _headers("s3"), b"", "s3:ListMultipartUploads"),
    ("POST", "/bkt?delete", _headers("s3"), b"<Delete/>", "s3:DeleteObjects"),
    ("GET", "/bkt/dir/key.eval", _headers("s3"), b"", "s3:GetObject"),
    ("PUT", "/bkt/dir/key.eval", _headers("s3"), b"x", "s3:PutObject"),
    ("PUT", "/bkt/k2", _headers("s3", x_amz_copy_source="bkt/k1"), b"", "s3:CopyObject"),
    ("HEAD", "/bkt/k", _headers("s3"), b"", "s3:HeadObject"),
    ("DELETE", "/bkt/k", _headers("s3"), b"", "s3:DeleteObject"),
    ("POST", "/bkt/k?uploads", _headers("s3"), b"", "s3:CreateMultipartUpload"),
    ("PUT", "/bkt/k?partNumber=1&uploadId=u", _headers("s3"), b"x", "s3:UploadPart"),
    ("PUT", "/bkt/k?partNumber=1&uploadId=u", _headers("s3", x_amz_copy_source="bkt/o"), b"", "s3:UploadPartCopy"),
    ("POST", "/bkt/k?uploadId=u", _headers("s3"), b"<x/>", "s3:CompleteMultipartUpload"),
    ("DELETE", "/bkt/k?uploadId=u", _headers("s3"), b"", "s3:AbortMultipartUpload"),
    ("GET", "/bkt/k?uploadId=u", _headers("s3"), b"", "s3:ListParts"),
    ("PUT", "/bkt/k?tagging", _headers("s3"), b"<x/>", "s3:PutObjectTagging"),
    ("GET", "/bkt?tagging", _headers("s3"), b"", "s3:GetBucketTagging"),
    # S3 presigned (credential scope in the query) and virtual-host style
    (
        "GET",
        "/bkt/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKID%2F20250101%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Signature=x",
        _headers(None),
        b"",
        "s3:GetObject",
    ),
    (
        "PUT",
        "/bkt/k?X-Amz-Credential=AKID%2F20250101%2Fus-east-1%2Fs3%2Faws4_request",
        _headers(None),
        b"x",
        "s3:PutObject",
    ),
    ("GET", "/dir/key", _headers("s3", host="bkt.s3.us-east-1.amazonaws.com"), b"", "s3:GetObject"),
    ("GET", "/?list-type=2", _headers("s3", host="bkt.s3.amazonaws.com"), b"", "s3:ListObjectsV2"),
    ("POST", "/moto-api/reset", _headers(None), b"", "moto:Api"),  # forwarded, never faulted
]


@pytest.mark.parametrize(
    ("method", "target", "headers", "body", "action"), PARSE_CASES, ids=[c[4] + " " + c[0] for c in PARSE_CASES]
)
def test_action_names(method, target, headers, body, action):
    assert classify(method, target, headers, body).action == action


def test_rule_specs_parse():
    assert FaultRule.parse("sqs:*:throttle:before:0.1") == FaultRule("sqs:*", "throttle", "before", 0.1)
    assert FaultRule.parse("*:5xx:after:1.0:3") == FaultRule("*", "5xx", "after", 1.0, 3)
    assert FaultRule.parse("s3:PutObject:5xx") == FaultRule("s3:PutObject", "5xx")
    with pytest.raises(ValueError):
        FaultRule.parse("s3:PutObject:teapot")
    with pytest.raises(ValueError):
        FaultRule("*", "throttle", "during")
    assert FaultRule("s3:*Object", "5xx").matches("s3:PutObject")
    assert not FaultRule("s3:*Object", "5xx").matches("s3:ListObjectsV2")


def test_live_traffic_is_named_like_aws_routes_it(proxy, tmp_path: Path):
    s3 = _client(proxy.endpoint_url, "s3", attempts=1)
    bucket = f"fp-{_uid()}"
    s3.create_bucket(Bucket=bucket)
    s3.head_bucket(Bucket=bucket)
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(6 * 1024 * 1024))
    mb5 = 5 * 1024 * 1024
    s3.upload_file(
        str(big),
        bucket,
        "big.bin",
        Config=TransferConfig(multipart_threshold=mb5, multipart_chunksize=mb5, max_concurrency=2),
    )
    assert s3.get_object(Bucket=bucket, Key="big.bin")["Body"].read() == big.read_bytes()
    s3.put_object(Bucket=bucket, Key="small.txt", Body=b"small")
    # (Not the multipart object: moto 5.2.5 gives its copy a wrong full-object checksum,
    # and botocore's GetObject then raises FlexibleChecksumError, with or without the proxy.)
    s3.copy_object(Bucket=bucket, Key="copy.bin", CopySource={"Bucket": bucket, "Key": "small.txt"})
    assert s3.get_object(Bucket=bucket, Key="copy.bin")["Body"].read() == b"small"
    s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "copy.bin"}]})
    s3.delete_object(Bucket=bucket, Key="big.bin")
    s3.list_objects_v2(Bucket=bucket)
    sqs = _client(proxy.endpoint_url, "sqs", attempts=1)
    url = sqs.create_queue(QueueName=f"fp-{_uid()}")["QueueUrl"]
    sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": "1", "MessageBody": "b"}])
    got = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=1)["Messages"]
    sqs.delete_message_batch(QueueUrl=url, Entries=[{"Id": "1", "ReceiptHandle": got[0]["ReceiptHandle"]}])
    ssm = _client(proxy.endpoint_url, "ssm", attempts=1)
    ssm.put_parameter(Name=f"/fp/{_uid()}", Value="x", Type="SecureString")
    _client(proxy.endpoint_url, "ec2", attempts=1).describe_security_groups()
    _client(proxy.endpoint_url, "iam", attempts=1).list_instance_profiles()
    assert set(proxy.calls) >= {
        "s3:CreateBucket", "s3:HeadBucket", "s3:CreateMultipartUpload", "s3:UploadPart",
        "s3:CompleteMultipartUpload", "s3:CopyObject", "s3:GetObject", "s3:DeleteObjects",
        "s3:DeleteObject", "s3:ListObjectsV2", "sqs:CreateQueue", "sqs:SendMessageBatch",
        "sqs:ReceiveMessage", "sqs:DeleteMessageBatch", "ssm:PutParameter",
        "ec2:DescribeSecurityGroups", "iam:ListInstanceProfiles",
    }  # fmt: skip
    assert proxy.calls["s3:UploadPart"] == 2
    assert not any(a.startswith("unknown") or a.endswith("Unknown") for a in proxy.calls), proxy.calls
    # The queue URL moto hands out points back through the proxy (Host is forwarded as sent).
    assert url.startswith(proxy.endpoint_url)


def test_sqs_query_protocol_is_named_and_faulted_as_aws_would(proxy):
    """Installed botocore and awscli speak JSON to SQS; older clients send Action=... forms."""
    sqs = _client(proxy.endpoint_url, "sqs", attempts=1)
    url = sqs.create_queue(QueueName=f"fp-q-{_uid()}")["QueueUrl"]

    def send(body: str) -> tuple[int, bytes, dict[str, str]]:
        form = f"Action=SendMessage&QueueUrl={urllib.request.quote(url, safe='')}&MessageBody={body}&Version=2012-11-05"
        req = AWSRequest("POST", proxy.endpoint_url + "/", data=form.encode(), headers={"Content-Type": FORM})
        SigV4Auth(Credentials(EMBEDDED_ACCESS_KEY, EMBEDDED_SECRET_KEY), "sqs", REGION).add_auth(req)
        prepared = req.prepare()
        http_req = urllib.request.Request(
            prepared.url, data=prepared.body, headers=dict(prepared.headers), method="POST"
        )
        try:
            with urllib.request.urlopen(http_req, timeout=10) as resp:
                return resp.status, resp.read(), dict(resp.headers)
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read(), dict(exc.headers)

    status, body, _ = send("plain")
    assert status == 200 and b"SendMessageResponse" in body  # moto still speaks the query protocol
    proxy.set_rules([FaultRule("sqs:SendMessage", "throttle", rate=1.0, limit=1)])
    status, body, headers = send("throttled")
    assert proxy.calls["sqs:SendMessage"] == 2
    assert proxy.injected[("sqs:SendMessage", "throttle", "before")] == 1
    # Parse it with botocore's own query-protocol parser, as an old client would.
    model = ServiceModel({"metadata": {"protocol": "query"}, "operations": {}, "shapes": {}})
    parsed = create_parser(model.protocol).parse({"status_code": status, "headers": headers, "body": body}, None)
    assert status == 400 and parsed["Error"]["Code"] == "ThrottlingException"
    assert THROTTLE_DETECTOR.is_throttling_error_from_context(RetryContext(attempt_number=1, parsed_response=parsed))


# --------------------------------------------------------------------------- plumbing


def test_keep_alive_bodies_and_concurrent_clients(proxy):
    s3 = _client(proxy.endpoint_url, "s3", attempts=1)
    bucket = f"fp-{_uid()}"
    s3.create_bucket(Bucket=bucket)
    for _ in range(30):
        s3.head_bucket(Bucket=bucket)
    assert proxy.connections_accepted <= 2  # botocore's pooled connection is reused

    blob = os.urandom(3 * 1024 * 1024 + 17)  # streamed back in many chunks
    s3.put_object(Bucket=bucket, Key="blob", Body=blob)
    assert s3.get_object(Bucket=bucket, Key="blob")["Body"].read() == blob
    assert s3.get_object(Bucket=bucket, Key="blob", Range="bytes=10-19")["Body"].read() == blob[10:20]

    # A chunked request body (Transfer-Encoding: chunked), as urllib3 sends for a generator.
    import urllib3

    req = AWSRequest(
        "PUT", f"{proxy.endpoint_url}/{bucket}/chunked", headers={"X-Amz-Content-SHA256": "UNSIGNED-PAYLOAD"}
    )
    SigV4Auth(Credentials(EMBEDDED_ACCESS_KEY, EMBEDDED_SECRET_KEY), "s3", REGION).add_auth(req)
    resp = urllib3.PoolManager().request(
        "PUT", req.url, body=iter([b"hello ", b"chunked ", b"world"]), headers=dict(req.headers), chunked=True
    )
    assert resp.status == 200, resp.data
    assert s3.get_object(Bucket=bucket, Key="chunked")["Body"].read() == b"hello chunked world"

    # Eight clients at once, each on its own kept-alive connection: every call is answered.
    # (How fast is a bench's question, not a test's: a busy machine made a ratio flaky.)
    clients = [_client(proxy.endpoint_url, "s3", attempts=1) for _ in range(8)]
    with ThreadPoolExecutor(len(clients)) as pool:
        codes = [
            code
            for codes in pool.map(
                lambda c: [c.head_bucket(Bucket=bucket)["ResponseMetadata"]["HTTPStatusCode"] for _ in range(25)],
                clients,
            )
            for code in codes
        ]
    assert codes == [200] * 200


def test_as_a_process_with_stats_on_sigterm(moto_server, aws_env, tmp_path: Path):
    stats = tmp_path / "stats.json"
    proc = spawn_proxy(
        moto_server.endpoint_url, ["sts:GetCallerIdentity:throttle:before:1.0:1"], stats_path=stats, seed=3
    )
    try:
        sts = _client(proc.endpoint_url, "sts", "standard", attempts=3)
        sts.get_caller_identity()
        live = proc.stats()
        assert live["injected"] == {"sts:GetCallerIdentity:throttle:before": 1}
        proc.set_rules([FaultRule("s3:*", "5xx", rate=1.0)])
        with pytest.raises(ClientError) as err:
            _client(proc.endpoint_url, "s3", attempts=1).list_buckets()
        assert err.value.response["Error"]["Code"] == "InternalError"
        proc.proc.send_signal(signal.SIGUSR1)  # write the stats without stopping
        deadline = time.monotonic() + 5
        while not stats.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert load_stats(stats)[1]["s3:ListBuckets"] == 1
    finally:
        proc.stop()
    assert proc.proc.returncode == 0
    injected, calls = load_stats(stats)
    assert injected == {("sts:GetCallerIdentity", "throttle", "before"): 1, ("s3:ListBuckets", "5xx", "before"): 1}
    assert calls == {"sts:GetCallerIdentity": 2, "s3:ListBuckets": 1}
    assert proc.injected == injected
    # The command line as documented: first line of stdout is the port.
    raw = subprocess.Popen(
        [sys.executable, str(Path(__file__).parents[1] / "testkit" / "faultproxy.py"), "--upstream", moto_server.endpoint_url,
         "--rule", "sqs:*:throttle:before:0.1", "--stats", str(tmp_path / "s2.json")],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        port = int(raw.stdout.readline())
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/__faultproxy__/stats", timeout=5) as resp:
            assert json.loads(resp.read())["calls"] == {}
    finally:
        raw.terminate()
        raw.wait(timeout=10)
    assert json.loads((tmp_path / "s2.json").read_text())["injected"] == {}


def test_moto_api_passes_and_upstream_down_is_a_retryable_502(moto_server, aws_env):
    with FaultProxy(moto_server.endpoint_url, [FaultRule("*", "5xx", rate=1.0)]) as p:
        with urllib.request.urlopen(f"{p.endpoint_url}/moto-api/", timeout=10) as resp:
            assert resp.status == 200  # moto's own API is never faulted
        assert p.calls["moto:Api"] == 1 and not p.injected
    with FaultProxy("http://127.0.0.1:9") as p:  # nothing listens on the discard port
        with pytest.raises(ClientError) as err:
            _client(p.endpoint_url, "sts", attempts=1).get_caller_identity()
        assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 502
        assert err.value.response["Error"]["Code"] == "InternalFailure"
        assert p.upstream_errors == 1

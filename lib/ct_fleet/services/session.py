"""boto3 sessions and clients with the retry policy every call site shares.

The controller passes the endpoint and credentials of the cloud it started (a
CloudContext's client_args); a worker, and anything that passes none, gets boto3's own
chain: the standard AWS_* variables of its environment, which is how the same code talks
to AWS or to the embedded moto server.

What this process's clients share (retry policy, the API call log, the default region and
profile) is read from the environment once, at the process's entry (the CLI, the worker),
and handed to `configure`; nothing here reads the environment.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any, Literal, cast, overload

import boto3
from botocore.config import Config

if TYPE_CHECKING:
    from mypy_boto3_ec2 import EC2Client
    from mypy_boto3_iam import IAMClient
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_ssm import SSMClient
    from mypy_boto3_sts import STSClient


RetryMode = Literal["legacy", "standard", "adaptive"]


@dataclass(frozen=True)
class ClientSettings:
    """What every client of this process shares."""

    # Adaptive mode adds client-side rate limiting on throttling on top of standard retries:
    # SQS/S3 throttling or 5xx must never lose a job or a result. Tests of the fault proxy
    # choose other modes.
    retry_mode: RetryMode = "adaptive"
    max_attempts: int = 8
    region: str = "us-east-1"  # when a caller names none
    profile: str | None = None  # when a caller passes neither a profile nor keys
    # Benchmarks and the IAM proof count every call the code makes, in every process.
    api_log: str | None = None
    # Which side makes the calls (worker/run-worker.sh exports "worker"), so the IAM proof
    # checks each call against the right policy.
    role: str = "controller"

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> ClientSettings:
        mode = environ.get("CT_FLEET_RETRY_MODE") or "adaptive"
        if mode not in ("legacy", "standard", "adaptive"):
            mode = "adaptive"
        return cls(
            retry_mode=cast(RetryMode, mode),
            max_attempts=int(environ.get("CT_FLEET_MAX_ATTEMPTS") or 8),
            region=environ.get("AWS_REGION") or environ.get("AWS_DEFAULT_REGION") or "us-east-1",
            profile=environ.get("AWS_PROFILE") or None,
            api_log=environ.get("CT_FLEET_API_LOG") or None,
            role=environ.get("CT_FLEET_ROLE") or "controller",
        )


_settings = ClientSettings()


def configure(settings: ClientSettings) -> None:
    """Set what this process's clients share; called once by the process's entry."""
    global _settings
    _settings = settings
    _session.cache_clear()


def settings() -> ClientSettings:
    return _settings


def client_config(max_pool: int = 32) -> Config:
    return Config(
        retries={"mode": _settings.retry_mode, "max_attempts": _settings.max_attempts},
        max_pool_connections=max_pool,
        connect_timeout=10,
        read_timeout=70,  # above SQS's 20 s long poll
    )


@cache
def _session(profile: str | None, region: str | None, keys: tuple[str | None, str | None, str | None]) -> boto3.Session:
    access_key, secret_key, token = keys
    return boto3.Session(
        profile_name=profile,
        region_name=region,
        aws_access_key_id=access_key,
        aws_secret_access_key=secret_key,
        aws_session_token=token,
    )


def reset() -> None:
    """Forget cached sessions: the credentials or endpoint in the environment changed."""
    _session.cache_clear()


def region_name() -> str:
    return _settings.region


def _record_call(path: str, role: str) -> Any:
    def record(event_name: str, **kwargs: Any) -> None:
        # event_name is "before-call.<service>.<Operation>"; one short line per call, so
        # O_APPEND writes from many processes do not interleave.
        _, service_name, operation = event_name.split(".", 2)
        with open(path, "a") as fh:
            fh.write(f"{os.getpid()} {service_name}:{operation} {role}\n")

    return record


# Typed for the services the fleet uses (their stubs are locked in requirements-test.lock);
# any other service is untyped.
@overload
def client(service: Literal["ec2"], region: str | None = None, profile: str | None = None, **kw: Any) -> EC2Client: ...
@overload
def client(service: Literal["iam"], region: str | None = None, profile: str | None = None, **kw: Any) -> IAMClient: ...
@overload
def client(service: Literal["s3"], region: str | None = None, profile: str | None = None, **kw: Any) -> S3Client: ...
@overload
def client(service: Literal["sqs"], region: str | None = None, profile: str | None = None, **kw: Any) -> SQSClient: ...
@overload
def client(service: Literal["ssm"], region: str | None = None, profile: str | None = None, **kw: Any) -> SSMClient: ...
@overload
def client(service: Literal["sts"], region: str | None = None, profile: str | None = None, **kw: Any) -> STSClient: ...
@overload
def client(service: str, region: str | None = None, profile: str | None = None, **kw: Any) -> Any: ...
def client(
    service: str,
    region: str | None = None,
    profile: str | None = None,
    *,
    endpoint_url: str | None = None,
    access_key_id: str | None = None,
    secret_access_key: str | None = None,
    session_token: str | None = None,
    **kw: Any,
) -> Any:
    keys = (access_key_id, secret_access_key, session_token)
    if not access_key_id:
        profile = profile or _settings.profile
    session = _session(profile, region or region_name(), keys)
    if endpoint_url:
        kw["endpoint_url"] = endpoint_url
    made: Any = session.client(service, config=client_config(), **kw)  # type: ignore[call-overload]
    if _settings.api_log:
        made.meta.events.register("before-call.*.*", _record_call(_settings.api_log, _settings.role))
    return made

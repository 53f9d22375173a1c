"""Shared fixtures: a moto server over HTTP and clients that talk to it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from botocore.config import Config

from ct_fleet.cloud.moto_server import EMBEDDED_ACCESS_KEY, EMBEDDED_SECRET_KEY, MotoServer

REPO = Path(__file__).resolve().parents[1]
REGION = "us-east-1"


@pytest.fixture(scope="session")
def moto_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoServer]:
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    with MotoServer(log_path=log, lease_timeout=3600) as server:
        yield server


@pytest.fixture
def aws_env(moto_server: MotoServer, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Point boto3 and the AWS CLI (via --endpoint-url in scripts) at the moto server."""
    env = {
        "AWS_ENDPOINT_URL": moto_server.endpoint_url,
        "AWS_ACCESS_KEY_ID": EMBEDDED_ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": EMBEDDED_SECRET_KEY,
        "AWS_DEFAULT_REGION": REGION,
        "AWS_REGION": REGION,
    }
    for key in ("AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return env


@pytest.fixture
def aws_client(aws_env: dict[str, str]):
    """A factory for boto3 clients against the moto server that fail fast on unsupported calls."""

    def make(service: str):
        return boto3.client(
            service,
            endpoint_url=aws_env["AWS_ENDPOINT_URL"],
            region_name=REGION,
            config=Config(retries={"max_attempts": 1, "mode": "standard"}),
        )

    return make

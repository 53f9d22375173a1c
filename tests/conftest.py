"""Shared fixtures: a moto server over HTTP, clients that talk to it, toyarena's Docker images."""

from __future__ import annotations

import os
import subprocess
import sys
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
    # The session's server leaves after an idle lease (1 h): a slow suite renews it per test.
    moto_server.renew()
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


def _docker_answers() -> bool:
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.fixture(scope="session")
def docker_daemon() -> None:
    """A running Docker, else a skip that says so (a failure under CT_FLEET_REQUIRE_DOCKER)."""
    if not _docker_answers():
        message = "Docker is not running here (bin/ensure-docker starts it)"
        if os.environ.get("CT_FLEET_REQUIRE_DOCKER"):
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture(scope="session")
def docker_images() -> list[str]:
    """toyarena's images, built (a no-op when they exist) on a running Docker.

    Without Docker the test skips, saying so, unless CT_FLEET_REQUIRE_DOCKER is set (bin/test
    sets it once bin/ensure-docker succeeded), where a missing Docker is a failure."""
    if not _docker_answers():
        message = "Docker is not running here (bin/ensure-docker starts it)"
        if os.environ.get("CT_FLEET_REQUIRE_DOCKER"):
            pytest.fail(message)
        pytest.skip(message)
    subprocess.run([str(REPO / "bin" / "build-images"), "toyarena"], check=True, capture_output=True, timeout=1800)
    out = subprocess.run(
        [sys.executable, "-m", "toyarena.images", "list"],
        env={**os.environ, "PYTHONPATH": str(REPO / "examples" / "settings")},
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout.split()

"""Shared fixtures: a moto server over HTTP, clients that talk to it, toyarena's Docker images."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from botocore.config import Config

from ct_fleet.cloud.moto_server import EMBEDDED_ACCESS_KEY, EMBEDDED_SECRET_KEY, MotoServer

REPO = Path(__file__).resolve().parents[1]
REGION = "us-east-1"

# Seconds per test module, as the last whole suite that passed measured them (written by
# pytest_sessionfinish below; commit it with the change that moved the figures). Modules
# are collected longest first, so that with bin/test's `--dist loadfile
# --no-loadscope-reorder` each pytest worker starts on a long one and the last modules
# left to hand out are short: the workers finish at about the same time. A module with no
# figure yet goes first, taken for long until measured.
DURATIONS = Path(__file__).with_name("durations.json")


def pytest_configure(config: pytest.Config) -> None:
    # Under `nohup ... &` SIGINT arrives ignored, and an ignored signal stays ignored across
    # exec: every controller the tests start would then shrug off the SIGINT a test sends
    # and the test would hang. A handler of our own is reset to the default on exec, so each
    # child starts with Python's usual KeyboardInterrupt.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # Inspect's bash tool runs `bash --login`, and on a machine whose profile runs pyenv's
    # init every such shell runs `pyenv rehash`, which takes a lock file. The fault tests
    # SIGKILL jobs with their shells: one killed mid-rehash leaves the lock, and every login
    # shell after it waited 60 s for it (a whole suite ran 2 minutes longer, model tests
    # timed out). A second is enough to give up on a lock nobody holds.
    os.environ.setdefault("PYENV_REHASH_TIMEOUT", "1")


def _recorded_seconds() -> dict[str, float]:
    try:
        seconds: dict[str, float] = json.loads(DURATIONS.read_text())
    except (OSError, ValueError):
        return {}
    return seconds


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    seconds = _recorded_seconds()
    items.sort(key=lambda item: -seconds.get(_module(item.path), math.inf))  # stable: modules stay whole


_module_seconds: dict[str, float] = {}


def _module(path: Path) -> str:
    """A test module's key in durations.json: its path under tests/ (a node id's is relative to the repo)."""
    return (REPO / path).relative_to(DURATIONS.parent).as_posix()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # Under xdist this runs in the controller too, with every worker's reports.
    module = _module(Path(report.nodeid.split("::")[0]))
    _module_seconds[module] = _module_seconds.get(module, 0.0) + report.duration


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """After a whole suite that passed, keep each module's seconds for the next run's order."""
    config = session.config
    if hasattr(config, "workerinput") or exitstatus != 0:
        return  # an xdist worker saw only its share; a failed run's figures are not the suite's
    if config.option.keyword or config.option.markexpr or getattr(config.option, "lf", False):
        return
    every = {_module(path) for path in DURATIONS.parent.rglob("test_*.py")}
    if not every <= _module_seconds.keys():
        return  # a part of the suite
    ordered = sorted(((name, round(_module_seconds[name], 1)) for name in every), key=lambda kv: -kv[1])
    DURATIONS.write_text(json.dumps(dict(ordered), indent=1) + "\n")


@pytest.fixture(scope="session")
def moto_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoServer]:
    """One moto server per pytest process, for as long as the session lasts (a suite on a
    busy machine can take over an hour): its lease is renewed while the session runs, so
    only a server whose session died exits on its own (after lease_timeout)."""
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    with MotoServer(log_path=log, lease_timeout=600) as server:
        stop = threading.Event()

        def renew() -> None:
            while not stop.wait(30):
                server.renew()

        renewer = threading.Thread(target=renew, daemon=True)
        renewer.start()
        try:
            yield server
        finally:
            stop.set()
            renewer.join()


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


def _docker_answers() -> bool:
    """Docker runs, and this pytest process is one of its users: bin/ensure-docker stops a
    daemon it started once its last user is gone, and the tests' fleets are users that end."""
    try:
        if subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode != 0:
            return False
    except (OSError, subprocess.TimeoutExpired):
        return False
    subprocess.run(
        [str(REPO / "bin" / "ensure-docker"), "start", "--owner", f"pytest-{os.getpid()}"],
        capture_output=True,
        timeout=120,
        check=False,  # not root: nothing of ours to stop either
    )
    return True


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

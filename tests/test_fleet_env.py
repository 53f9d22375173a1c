"""The fleet.env contract: what the controller writes is what the worker reads, and a
partial fleet.env (a step rerun by hand) falls back to the protocol's defaults."""

from __future__ import annotations

from pathlib import Path

from ct_fleet.protocol import FleetEnv
from ct_fleet.protocol import fleet_env as contract
from ct_fleet.worker.loop import WorkerSettings


def test_worker_reads_fleet_env_with_the_protocols_defaults(tmp_path: Path) -> None:
    s = WorkerSettings.from_env({"FLEET_ID": "f1", "BUCKET": "b", "WORK_DIR": str(tmp_path)})
    assert s.fleet_id == "f1" and s.bucket == "b"
    assert s.max_concurrency == contract.DEFAULT_CONCURRENCY
    assert s.idle_timeout == contract.DEFAULT_IDLE_TIMEOUT
    assert s.visibility_timeout == contract.DEFAULT_VISIBILITY_TIMEOUT
    assert s.heartbeat_interval == contract.DEFAULT_HEARTBEAT_INTERVAL
    assert s.retry_backoff == contract.DEFAULT_RETRY_BACKOFF
    assert s.spot is False


def test_what_the_controller_writes_the_worker_reads(tmp_path: Path) -> None:
    written = FleetEnv(
        FLEET_ID="f2",
        BUCKET="b2",
        CONCURRENCY=3,
        IDLE_TIMEOUT=0,
        VISIBILITY_TIMEOUT=40,
        HEARTBEAT_INTERVAL=5,
        RETRY_BACKOFF=1,
        SPOT=True,
        WORKER_USER="",
    )
    env = written.to_env()
    assert "WORKER_USER" not in env and env["SPOT"] == "true" and env["IDLE_TIMEOUT"] == "0"
    assert FleetEnv.from_env(env) == written
    s = WorkerSettings.from_env({**env, "WORK_DIR": str(tmp_path)})
    assert (s.max_concurrency, s.idle_timeout, s.visibility_timeout, s.heartbeat_interval, s.retry_backoff, s.spot) == (
        3,
        0,
        40,
        5,
        1,
        True,
    )

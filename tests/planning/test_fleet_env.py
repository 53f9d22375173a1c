"""The fleet.env contract: what the controller writes is what the worker reads, a partial
fleet.env (a step rerun by hand) falls back to the knobs' EC2 defaults, and a knob
declared once (protocol/knobs.py) shows in --help, validation, fleet.env and the worker."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from ct_fleet.errors import BadInput
from ct_fleet.protocol import Ec2Config, FleetEnv, knob_parsing, knobs
from ct_fleet.protocol import knob_rules as rules
from ct_fleet.worker.settings import WorkerSettings


def test_worker_reads_fleet_env_with_the_knobs_ec2_defaults(tmp_path: Path) -> None:
    s = WorkerSettings.from_env({"FLEET_ID": "f1", "BUCKET": "b", "WORK_DIR": str(tmp_path)})
    ec2 = Ec2Config().for_cloud("aws", "us-east-1")
    assert s.fleet_id == "f1" and s.bucket == "b"
    assert s.max_concurrency == ec2.concurrency_per_worker == 20
    assert s.idle_timeout == ec2.idle_timeout == 60
    assert s.visibility_timeout == ec2.visibility_timeout
    assert s.heartbeat_interval == ec2.heartbeat_interval
    assert s.retry_backoff == ec2.retry_backoff
    assert s.spot is False


def test_what_the_controller_writes_the_worker_reads(tmp_path: Path) -> None:
    cfg = replace(
        Ec2Config().for_cloud("aws", "us-east-1"),
        bucket="b2",
        concurrency_per_worker=3,
        idle_timeout=0,
        visibility_timeout=40,
        heartbeat_interval=5,
        retry_backoff=1,
        spot=True,
    )
    written = FleetEnv(FLEET_ID="f2", knobs=cfg)
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


def test_only_declared_knobs_reach_workers() -> None:
    env = FleetEnv(FLEET_ID="f", knobs=Ec2Config().for_cloud("aws", "us-east-1")).to_env()
    declared = {knobs.info(f).worker for f in knobs.knob_fields()} - {None}
    own = {"FLEET_ID"}
    assert set(env) - own <= declared
    assert "MAX_WORKERS" not in env and "INSTANCE_TYPE" not in env  # the controller's knobs stay home


@dataclass(frozen=True)
class WithSlack(Ec2Config):
    """Ec2Config with one knob more, declared the one way knobs are."""

    slack_seconds: int = knobs.knob(
        7, "seconds of slack a worker allows", rule=rules.whole(1, 60), identity=True, worker="SLACK_SECONDS"
    )


def test_a_knob_declared_once_is_in_help_validation_fleet_env_and_the_worker(tmp_path: Path) -> None:
    assert "slack_seconds=7: seconds of slack a worker allows (part of the fleet id)" in knobs.help_table(WithSlack)
    assert knob_parsing.parse_ec2_args(["slack_seconds=9"], WithSlack) == {"slack_seconds": 9}
    with pytest.raises(BadInput, match=r"slack_seconds=99: must be at most 60"):
        knob_parsing.parse_ec2_args(["slack_seconds=99"], WithSlack)
    with pytest.raises(BadInput, match="unknown --ec2-arg 'slack_seconds'"):
        knob_parsing.parse_ec2_args(["slack_seconds=9"])  # not a knob of the real config
    cfg = knob_parsing.build_config({"slack_seconds": 9}, cls=WithSlack).for_cloud("aws", "us-east-1")
    assert knobs.identity(cfg)["slack_seconds"] == 9
    env = FleetEnv(FLEET_ID="f", knobs=cfg).to_env()
    assert env["SLACK_SECONDS"] == "9"
    settings = WorkerSettings.from_env({**env, "WORK_DIR": str(tmp_path)}, knobs=WithSlack)
    assert isinstance(settings.knobs, WithSlack) and settings.knobs.slack_seconds == 9


def test_per_cloud_defaults_are_declared_for_every_cloud() -> None:
    for f in knobs.knob_fields():
        meta = knobs.info(f)
        if meta.per_cloud:
            assert f.default is None and set(meta.per_cloud) == set(knobs.CLOUDS), f.name
    with pytest.raises(TypeError, match="per-cloud"):
        knobs.knob(None, "half declared", per_cloud={"aws": 1})


def test_a_knob_of_the_wrong_type_cannot_travel() -> None:
    cfg = Ec2Config().for_cloud("aws", "us-east-1")
    with pytest.raises(BadInput, match="CONCURRENCY"):
        FleetEnv(FLEET_ID="f", knobs=replace(cfg, concurrency_per_worker="3\nFLEET_ENV\n"))  # type: ignore[arg-type]
    with pytest.raises(BadInput, match="SPOT"):
        FleetEnv(FLEET_ID="f", knobs=replace(cfg, spot="true"))  # type: ignore[arg-type]

"""Ec2Config: every fleet knob, set with `--ec2-arg key=value` or `ec2_args:` in a run config.

The dataclass fields are the single source of truth: their types drive parsing, their
defaults and help texts drive `--help`. A default of None means "chosen per cloud" (the
embedded cloud on a 2-core laptop wants fewer, shorter-lived workers than EC2).
"""

from __future__ import annotations

import difflib
import os
import typing
from dataclasses import dataclass, field, fields, replace
from typing import Any

from ..errors import BadInput
from . import ec2_rules


def knob(default: Any, help: str) -> Any:
    return field(default=default, metadata={"help": help})


@dataclass(frozen=True)
class Ec2Config:
    max_workers: int | None = knob(None, "most workers at once (default 24 on EC2, one per core locally)")
    concurrency_per_worker: int | None = knob(
        None, "most concurrent samples per worker; starts at 10 and adapts (default 20 on EC2, 2 locally)"
    )
    instance_type: str = knob("c6i.4xlarge", "EC2 instance type; part of the fleet id")
    ami: str | None = knob(None, "AMI id or SSM parameter path (default: /linuxbench/worker-ami-id, else stock Ubuntu)")
    stock_ami_param: str = knob(
        "/aws/service/canonical/ubuntu/server/22.04/stable/current/amd64/hvm/ebs-gp2/ami-id",
        "public SSM parameter of the stock Ubuntu AMI used when no worker AMI exists",
    )
    ami_param: str = knob("/linuxbench/worker-ami-id", "SSM parameter holding the baked worker AMI id")
    region: str | None = knob(None, "AWS region (default: AWS_REGION, else us-east-1)")
    bucket: str = knob("lb-fleet-results-migrated", "S3 bucket for results, manifests, code artifacts and logs")
    instance_profile: str = knob("linuxbench-worker", "IAM instance profile of the workers")
    security_group: str = knob("linuxbench-fleet-worker-sg", "security group of the workers (created without ingress)")
    volume_gb: int = knob(100, "root volume size in GiB")
    spot: bool = knob(False, "launch spot instances")
    estimate: bool = knob(False, "print the cost estimate and launch nothing")
    auto_confirm: bool = knob(False, "skip the cost confirmation prompt")
    new_fleet: bool = knob(False, "start a fresh fleet instead of resuming one with the same id")
    resume: str | None = knob(None, "id of a fleet to resume, e.g. one started with new_fleet=true (same inputs)")
    max_cost: float | None = knob(None, "stop launching and tear down when the cost so far reaches this (USD)")
    hourly_price: float | None = knob(
        None, "USD per instance-hour for estimates (default: the dated table in lib/ct_fleet/controller/prices.json)"
    )
    sample_time_limit: int = knob(3600, "seconds one sample may run before it is killed (class timeout)")
    job_memory_mb: int = knob(
        0, "MB of RSS one job may use before it is killed (class memory); 0: half the worker's RAM"
    )
    warm_runner: bool = knob(
        True, "run Inspect jobs in children forked from a warm process (false: a fresh interpreter per job)"
    )
    worker_setup: str | None = knob(None, "<extra-src basename>/<path> of a script run as root before jobs")
    worker_user: str | None = knob(None, "account that runs jobs on workers (added to docker, owns /opt/linuxbench)")
    visibility_timeout: int = knob(120, "seconds a received job stays hidden; workers extend it while the job runs")
    max_receive_count: int = knob(3, "attempts before a job goes to the dead-letter queue")
    retry_backoff: int = knob(30, "seconds before a failed attempt is retried, times the attempt number")
    idle_timeout: int | None = knob(
        None, "seconds a worker waits on an empty queue before it shuts down (default 60 on EC2, 8 locally)"
    )
    max_replacements: int = knob(3, "workers launched to replace ones that died early, before giving up")
    stale_after: int = knob(600, "seconds without progress before a stale warning")
    silent_timeout: int = knob(10800, "seconds without progress, with workers silent, before the fleet is terminated")
    no_sample_timeout: int = knob(21600, "seconds without any completed sample before the fleet is terminated")
    heartbeat_interval: int = knob(30, "seconds between worker heartbeats (load, in-flight, concurrency)")
    check_interval: int | None = knob(
        None, "seconds between the controller's looks at EC2 and the queues (default 15 on EC2, 5 locally)"
    )

    def with_defaults(self, defaults: dict[str, Any]) -> "Ec2Config":
        """Fill the knobs left None ("per cloud") from the cloud's defaults, and the region."""
        chosen = {k: v for k, v in defaults.items() if getattr(self, k) is None}
        region = self.region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
        if region != self.region:
            region = ec2_rules.check_value("region", region, where="AWS_REGION:")
        cfg = replace(self, **chosen, region=region)
        ec2_rules.check_config(cfg)
        return cfg


def _coerce(key: str, raw: Any, where: str = "--ec2-arg") -> Any:
    if isinstance(raw, str):
        raw = raw.strip()
        if raw.lower() in ("none", "null", ""):
            raw = None
    if raw is None and type(None) not in typing.get_args(typing.get_type_hints(Ec2Config)[key]):
        raise BadInput(f"{where} {key} needs a value (see `ct-fleet eval --help`)")
    return ec2_rules.check_value(key, raw, where)


def knob_names() -> list[str]:
    return [f.name for f in fields(Ec2Config)]


def _check_key(key: str) -> None:
    if key not in knob_names():
        close = difflib.get_close_matches(key, knob_names(), n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise BadInput(f"unknown --ec2-arg {key!r}{hint}; see `ct-fleet eval --help` for the list")


def parse_ec2_args(pairs: typing.Iterable[str]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        key = key.strip()
        if not sep:
            raise BadInput(f"--ec2-arg {pair!r}: write key=value")
        _check_key(key)
        values[key] = _coerce(key, raw)
    return values


def from_mapping(mapping: dict[str, Any], where: str) -> dict[str, Any]:
    """ec2_args from a YAML run config: same keys and types as --ec2-arg."""
    if not isinstance(mapping, dict):
        raise BadInput(f"{where}: ec2_args must be a mapping of key: value")
    values = {}
    for key, raw in mapping.items():
        _check_key(str(key))
        values[str(key)] = _coerce(str(key), raw, where=f"{where}:")
    return values


def build_config(*layers: dict[str, Any]) -> Ec2Config:
    """Later layers win: run config, then the attack's ec2_args, then the command line."""
    merged: dict[str, Any] = {}
    for layer in layers:
        merged.update(layer)
    return Ec2Config(**merged)


def help_table() -> str:
    lines = []
    for f in fields(Ec2Config):
        default = "per cloud" if f.default is None and "default" in f.metadata["help"] else f.default
        lines.append(f"{f.name}={default}: {f.metadata['help']}")
    return "\n".join(lines)

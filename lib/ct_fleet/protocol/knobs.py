"""Every fleet knob, defined once: `--ec2-arg key=value`, `ec2_args:` in a run config.

A knob is one field of Ec2Config. Its declaration holds everything about it: the type,
the rule a value must pass (protocol/knob_rules.py), the help `--help` shows, the
default (or one default per cloud, where the field's default is None), whether the
fleet id covers it, and the fleet.env name under which it reaches workers. Parsing
(protocol/knob_parsing.py), validation, `--help`, the fleet id, fleet.env
(protocol/knob_env.py, fleet_env.py) and the worker's settings all read these
declarations; nothing else lists knobs.
"""

from __future__ import annotations

import os
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import Field, dataclass, field, fields, replace
from typing import Any

from pydantic import TypeAdapter, ValidationError

from ..error_lines import shown
from ..errors import BadInput
from . import knob_rules as r

CLOUDS = ("aws", "embedded")  # Cloud.kind of each cloud (ct_fleet.cloud)
DEFAULT_REGION = "us-east-1"


@dataclass(frozen=True)
class Computed:
    """A default computed where it is used (this machine's cores), described for --help."""

    compute: Callable[[], Any]
    description: str

    def __str__(self) -> str:
        return self.description


@dataclass(frozen=True)
class Knob:
    help: str
    rule: Any = None  # a pydantic type; None: the field's own type
    per_cloud: Mapping[str, Any] = field(default_factory=dict)  # cloud kind -> default, for a None default
    identity: bool = False  # part of the fleet id
    worker: str | None = None  # its fleet.env name, when it reaches workers
    listed: bool = False  # comma-separated text, also given as a YAML list


def knob(
    default: Any,
    help: str,
    *,
    rule: Any = None,
    per_cloud: Mapping[str, Any] | None = None,
    identity: bool = False,
    worker: str | None = None,
    listed: bool = False,
) -> Any:
    if per_cloud is not None and (default is not None or set(per_cloud) != set(CLOUDS)):
        raise TypeError(f"a per-cloud knob has default None and a value for each of {CLOUDS}")
    info = Knob(help, rule, dict(per_cloud or {}), identity, worker, listed)
    return field(default=default, metadata={"knob": info})


def _cores() -> int:
    return os.cpu_count() or 2


@dataclass(frozen=True)
class Ec2Config:
    max_workers: int | None = knob(
        None,
        "most workers at once",
        rule=r.whole(1, 1000),
        per_cloud={"aws": 24, "embedded": Computed(_cores, "one per core")},
    )
    concurrency_per_worker: int | None = knob(
        None,
        "most concurrent samples per worker; starts at 10 and adapts (--max-connections bounds their requests)",
        rule=r.whole(1, 256),
        per_cloud={"aws": 20, "embedded": 2},
        worker="CONCURRENCY",
    )
    instance_type: str = knob(
        "c6i.4xlarge",
        "EC2 instance type (one; instance_types takes several)",
        rule=r.text(r.instance_type),
        identity=True,
    )
    instance_types: str | None = knob(
        None,
        "EC2 instance types to launch from, first preferred (default: instance_type)",
        rule=r.text(r.listed(r.instance_type, most=20)),
        identity=True,
        listed=True,
    )
    subnets: str | None = knob(
        None,
        "subnet ids to launch in, one VPC (default: every default subnet of the region)",
        rule=r.text(r.listed(r.subnet_id, most=50)),
        listed=True,
    )
    ami: str | None = knob(
        None, "AMI id or SSM parameter path (default: /linuxbench/worker-ami-id, else stock Ubuntu)", rule=r.text(r.ami)
    )
    stock_ami_param: str = knob(
        "/aws/service/canonical/ubuntu/server/22.04/stable/current/amd64/hvm/ebs-gp2/ami-id",
        "public SSM parameter of the stock Ubuntu AMI used when no worker AMI exists",
        rule=r.text(r.ssm_path),
    )
    ami_param: str = knob(
        "/linuxbench/worker-ami-id", "SSM parameter holding the baked worker AMI id", rule=r.text(r.ssm_path)
    )
    region: str | None = knob(
        None,
        "AWS region (default: AWS_REGION, else us-east-1)",
        rule=r.text(r.pattern(r"[a-z]{2}(-[a-z]+)+-\d{1,2}", "not an AWS region name (e.g. us-east-1, eu-west-2)")),
        worker="AWS_REGION",
    )
    bucket: str = knob(
        "lb-fleet-results-migrated",
        "S3 bucket for results, manifests, code artifacts and logs",
        rule=r.text(r.bucket_name),
        worker="BUCKET",
    )
    instance_profile: str = knob(
        "linuxbench-worker",
        "IAM instance profile of the workers",
        rule=r.text(
            r.pattern(
                r"[A-Za-z0-9+=,.@_-]{1,128}", "not an IAM instance profile name (1-128 of letters, digits, +=,.@_-)"
            )
        ),
    )
    security_group: str = knob(
        "linuxbench-fleet-worker-sg",
        "security group of the workers (created without ingress)",
        rule=r.text(
            r.pattern(
                r"(?!sg-)[A-Za-z0-9 ._:/()#,@\[\]+=&;{}!$*-]{1,255}",
                "not a security group name (1-255 characters, not starting with sg-)",
            )
        ),
    )
    # gp3 root volumes: at least the size of the AMI's snapshot (8 GiB for Ubuntu), at most EBS's 16 TiB.
    volume_gb: int = knob(100, "root volume size in GiB", rule=r.whole(8, 16384))
    spot: bool = knob(False, "launch spot instances", worker="SPOT")
    on_demand_fallback: bool = knob(True, "with spot=true, launch on-demand when no spot pool has capacity")
    estimate: bool = knob(False, "print the cost estimate and launch nothing")
    auto_confirm: bool = knob(False, "skip the cost confirmation prompt")
    new_fleet: bool = knob(False, "start a fresh fleet instead of resuming one with the same id")
    retry_errors: bool = knob(
        True, "a rerun runs the samples that errored again, as inspect eval-set does (false: keep them)"
    )
    resume: str | None = knob(
        None,
        "id of a fleet to resume, e.g. one started with new_fleet=true (same inputs)",
        rule=r.text(r.pattern(r"[0-9a-f]{12}", "not a fleet id (12 hex digits, as printed by ct-fleet eval)")),
    )
    max_cost: float | None = knob(
        None, "tear down when the cost so far, EC2 plus model tokens, reaches this (USD)", rule=r.dollars(1_000_000)
    )
    hourly_price: float | None = knob(
        None,
        "USD per instance-hour for estimates (default: the dated table in lib/ct_fleet/cloud/prices.json)",
        rule=r.dollars(1_000),
    )
    sample_time_limit: int = knob(
        3600,
        "seconds one sample may run before it is killed (class timeout); set, it is also Inspect's time_limit",
        rule=r.whole(0, r.WEEK),
        identity=True,
    )
    job_memory_mb: int = knob(
        0,
        "MB of RSS one job may use before it is killed (class memory); 0: half the worker's RAM",
        rule=r.whole(0, 16 << 20),
        worker="JOB_MEMORY_MB",
    )
    warm_runner: bool = knob(
        True,
        "run Inspect jobs in children forked from a warm process (false: a fresh interpreter per job)",
        worker="WARM_RUNNER",
    )
    worker_setup: str | None = knob(
        None,
        "<extra-src basename>/<path> of a script run as root before jobs",
        rule=r.text(r.worker_setup),
        identity=True,
        worker="WORKER_SETUP",
    )
    shared_budget: str | None = knob(
        None,
        "providers (model-name prefixes, e.g. openai-api/vllm) whose models share one --max-connections budget",
        rule=r.text(
            r.listed(
                r.pattern(r"[A-Za-z0-9._:-]+(/[A-Za-z0-9._:-]+)*", "a provider prefix such as openai-api/vllm"), most=20
            )
        ),
        listed=True,
    )
    forward_env: str | None = knob(
        None, "NAME,... of more variables jobs get, as per-instance SSM secrets", rule=r.text(r.secret_names)
    )
    setting_requirements: str | None = knob(
        None,
        "pip requirements (or .whl paths), comma-separated, workers install before settings-pull",
        identity=True,
    )
    worker_user: str | None = knob(
        None,
        "account that runs jobs on workers (added to docker, owns /opt/linuxbench)",
        rule=r.text(
            r.pattern(r"[a-z_][a-z0-9_-]{0,31}", "not a Linux user name (lowercase letters, digits, _ and -, up to 32)")
        ),
        worker="WORKER_USER",
    )
    visibility_timeout: int = knob(
        120,
        "seconds a received job stays hidden; workers extend it while the job runs",
        rule=r.whole(1, r.SQS_MAX_VISIBILITY),
        worker="VISIBILITY_TIMEOUT",
    )
    max_receive_count: int = knob(3, "attempts before a job goes to the dead-letter queue", rule=r.whole(1, 1000))
    retry_backoff: int = knob(
        30,
        "seconds before a failed attempt is retried, times the attempt number",
        rule=r.whole(0, r.SQS_MAX_VISIBILITY),
        worker="RETRY_BACKOFF",
    )
    idle_timeout: int | None = knob(
        None,
        "seconds a worker waits on an empty queue before it shuts down",
        rule=r.whole(0, 24 * 3600),
        per_cloud={"aws": 60, "embedded": 8},
        worker="IDLE_TIMEOUT",
    )
    max_replacements: int = knob(
        3, "workers launched to replace ones that died early, before giving up", rule=r.whole(0, 1000)
    )
    stale_after: int = knob(600, "seconds without progress before a stale warning", rule=r.whole(1, r.WEEK))
    silent_timeout: int = knob(
        10800, "seconds without progress, with workers silent, before the fleet is terminated", rule=r.whole(1, r.WEEK)
    )
    no_sample_timeout: int = knob(
        21600, "seconds without any completed sample before the fleet is terminated", rule=r.whole(1, r.WEEK)
    )
    heartbeat_interval: int = knob(
        30,
        "seconds between worker heartbeats (load, in-flight, concurrency)",
        rule=r.whole(1, 3600),
        worker="HEARTBEAT_INTERVAL",
    )
    check_interval: int | None = knob(
        None,
        "seconds between the controller's looks at EC2 and the queues",
        rule=r.whole(1, 3600),
        per_cloud={"aws": 15, "embedded": 5},
    )
    live_merge_interval: int = knob(
        60,
        "seconds at least between merges of the results so far into runs/<fleet>/merged/ during a run (0: off)",
        rule=r.whole(0, r.WEEK),
    )

    @property
    def types(self) -> tuple[str, ...]:
        """The instance types workers launch as, the preferred first."""
        return tuple(split(self.instance_types)) if self.instance_types else (self.instance_type,)

    def for_cloud(self, kind: str, region: str) -> "Ec2Config":
        """Fill the knobs left None with the cloud's defaults, and the region; check the rules
        between knobs. `region` is where the user's environment points (AWS_REGION)."""
        chosen = {}
        for f in knob_fields(type(self)):
            default = info(f).per_cloud.get(kind)
            if default is not None and getattr(self, f.name) is None:
                chosen[f.name] = default.compute() if isinstance(default, Computed) else default
        if self.region is None:
            chosen["region"] = check_value("region", region, where="AWS_REGION:", cls=type(self))
        cfg = replace(self, **chosen)
        check_config(cfg)
        return cfg


# visibility_timeout must leave room for this many heartbeat intervals: the thread that
# extends a running job's visibility is the one that sends heartbeats, so a slow
# heartbeat call delays the extension (and a lapsed job is handed out twice).
VISIBILITY_HEARTBEATS = 2


def split(value: str | None) -> list[str]:
    """The items of a listed knob's value."""
    return [item.strip() for item in (value or "").split(",")]


def info(f: Field[Any]) -> Knob:
    meta: Knob = f.metadata["knob"]
    return meta


def knob_fields(cls: type[Ec2Config] = Ec2Config) -> Iterator[Field[Any]]:
    yield from fields(cls)


def knob_names(cls: type[Ec2Config] = Ec2Config) -> list[str]:
    return [f.name for f in fields(cls)]


_ADAPTERS: dict[tuple[type[Ec2Config], str], TypeAdapter[Any]] = {}


def _adapter(cls: type[Ec2Config], name: str) -> TypeAdapter[Any]:
    if (cls, name) not in _ADAPTERS:
        _ADAPTERS[cls, name] = _new_adapter(cls, name)
    return _ADAPTERS[cls, name]


def _new_adapter(cls: type[Ec2Config], name: str) -> TypeAdapter[Any]:
    hint = typing.get_type_hints(cls)[name]
    f = next(f for f in fields(cls) if f.name == name)
    rule = info(f).rule
    if rule is None:
        return TypeAdapter(hint)
    optional = type(None) in typing.get_args(hint)
    return TypeAdapter(rule | None if optional else rule)


def check_value(name: str, raw: Any, where: str = "--ec2-arg", cls: type[Ec2Config] = Ec2Config) -> Any:
    """The knob's value from a command line string or a YAML scalar; BadInput when it is not acceptable."""
    listed = info(next(f for f in fields(cls) if f.name == name)).listed
    if isinstance(raw, list) and listed:
        if not raw:
            raise BadInput(f"{where} {name}: an empty list; leave it out for the default")
        raw = ",".join(str(item) for item in raw)
    if isinstance(raw, (list, dict)):
        raise BadInput(
            f"{where} {name}: expected a single value, not a {'list' if isinstance(raw, list) else 'mapping'}"
        )
    try:
        return _adapter(cls, name).validate_python(raw)
    except ValidationError as exc:
        raise BadInput(f"{where} {name}={shown(raw)}: {r.reason(exc)}") from None


def check_config(cfg: Ec2Config) -> None:
    """Rules between knobs, on the final config (per-cloud defaults filled in)."""
    margin = VISIBILITY_HEARTBEATS * cfg.heartbeat_interval
    if cfg.visibility_timeout < margin:
        raise BadInput(
            f"visibility_timeout={cfg.visibility_timeout} must be at least {VISIBILITY_HEARTBEATS} x "
            f"heartbeat_interval ({margin}s) or running jobs get handed out twice: raise visibility_timeout "
            "or lower heartbeat_interval"
        )
    if cfg.instance_types and cfg.instance_type != _default("instance_type") and cfg.instance_type != cfg.types[0]:
        raise BadInput(
            f"instance_type={cfg.instance_type} and instance_types={cfg.instance_types} disagree: "
            "keep instance_types (the first is preferred)"
        )
    if cfg.resume and cfg.new_fleet:
        raise BadInput("resume=<fleet id> and new_fleet=true contradict each other: drop one")


def _default(name: str) -> Any:
    return next(f.default for f in fields(Ec2Config) if f.name == name)


def help_table(cls: type[Ec2Config] = Ec2Config) -> str:
    """One line per knob for `ct-fleet eval --help`: name=default: help (per-cloud defaults, the fleet id)."""
    lines = []
    for f in knob_fields(cls):
        meta = info(f)
        notes = []
        if meta.per_cloud:
            notes.append("default " + ", ".join(f"{value} on {kind}" for kind, value in meta.per_cloud.items()))
        if meta.identity:
            notes.append("part of the fleet id")
        default = "per cloud" if meta.per_cloud else f.default
        tail = f" ({'; '.join(notes)})" if notes else ""
        lines.append(f"{f.name}={default}: {meta.help}{tail}")
    return "\n".join(lines)


def identity(cfg: Ec2Config, **values: Any) -> dict[str, Any]:
    """The knobs the fleet id covers, name -> value; `values` replaces a knob's value with
    what it stands for (a script's digest beside its path, say). None values are left out."""
    out = {}
    for f in knob_fields(type(cfg)):
        if info(f).identity:
            value = values[f.name] if f.name in values else getattr(cfg, f.name)
            if value is not None:
                out[f.name] = value
    return out

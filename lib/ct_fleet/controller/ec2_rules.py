"""What each fleet knob may hold: types, ranges, AWS's naming rules, and the rules between knobs.

Ec2Config (config.py) says which knobs exist, their defaults and help; this module says
which values are acceptable, with pydantic doing the type work. Every refusal is one line
naming the knob, the value and what would be accepted, raised before anything exists.
"""

from __future__ import annotations

import ipaddress
import math
import re
import typing
from collections.abc import Callable
from functools import cache
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import AfterValidator, BeforeValidator, Field, TypeAdapter, ValidationError

from ..errors import BadInput

if TYPE_CHECKING:
    from .config import Ec2Config

SQS_MAX_VISIBILITY = 43200  # seconds; SQS's ceiling for VisibilityTimeout and ChangeMessageVisibility
WEEK = 7 * 24 * 3600


def _pattern(regex: str, what: str) -> Callable[[str], str]:
    compiled = re.compile(regex)

    def check(value: str) -> str:
        if not compiled.fullmatch(value):
            raise ValueError(what)
        return value

    return check


def _bucket_name(value: str) -> str:
    """S3's rules for general purpose bucket names."""
    what = "not an S3 bucket name: 3-63 lowercase letters, digits, dots and hyphens, starting and ending with a letter or digit"
    if not re.fullmatch(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", value) or ".." in value:
        raise ValueError(what)
    try:
        ipaddress.IPv4Address(value)
    except ValueError:
        pass
    else:
        raise ValueError("not an S3 bucket name: it may not look like an IP address")
    if value.startswith(("xn--", "sthree-", "amzn-s3-demo-")) or value.endswith(
        ("-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3")
    ):
        raise ValueError("not an S3 bucket name: that prefix or suffix is reserved by AWS")
    return value


def _ssm_path(value: str) -> str:
    what = "not an SSM parameter path: /a/b/c of letters, digits and _.-"
    if not re.fullmatch(r"(/[A-Za-z0-9_.-]+){1,15}", value) or len(value) > 1011:
        raise ValueError(what)
    return value


def is_ssm_path(value: str) -> bool:
    try:
        _ssm_path(value)
    except ValueError:
        return False
    return True


def _ami(value: str) -> str:
    if value.startswith("ami-"):
        if not re.fullmatch(r"ami-([0-9a-f]{8}|[0-9a-f]{17})", value):
            raise ValueError("not an AMI id (ami- and 8 or 17 hex digits)")
        return value
    if value.startswith("/"):
        return _ssm_path(value)
    raise ValueError("write an AMI id (ami-...) or the SSM parameter path that holds one (/...)")


def _worker_setup(value: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)+", value) or len(value) > 512:
        raise ValueError("write <extra-src basename>/<path> with letters, digits and ._- in the names")
    if any(part in (".", "..") for part in value.split("/")):
        raise ValueError("the path must stay inside its extra-src tree (no . or .. parts)")
    return value


def _no_bool(value: Any) -> Any:
    # YAML's `true` would otherwise be read as the number 1.
    if isinstance(value, bool):
        raise ValueError("expected a number, not true/false")
    return value


def _finite(value: Any) -> Any:
    value = _no_bool(value)
    try:
        number = float(value)
    except (TypeError, ValueError):
        return value  # pydantic names the type error
    if not math.isfinite(number):
        raise ValueError("must be a finite number")
    return value


def _seconds(low: int, high: int) -> Any:
    return Annotated[int, BeforeValidator(_no_bool), Field(ge=low, le=high)]


def _count(low: int, high: int) -> Any:
    return Annotated[int, BeforeValidator(_no_bool), Field(ge=low, le=high)]


def _dollars(high: float) -> Any:
    return Annotated[float, BeforeValidator(_finite), Field(gt=0, le=high, allow_inf_nan=False)]


def _text(check: Callable[[str], str]) -> Any:
    return Annotated[str, AfterValidator(check)]


# Knob -> the type a value must have; knobs of Ec2Config not named here keep their plain type.
RULES: dict[str, Any] = {
    "max_workers": _count(1, 1000),
    "concurrency_per_worker": _count(1, 256),
    "instance_type": _text(
        _pattern(r"[a-z][a-z0-9-]{0,19}\.[a-z0-9-]{1,20}", "not an EC2 instance type (family.size, e.g. c6i.4xlarge)")
    ),
    "ami": _text(_ami),
    "stock_ami_param": _text(_ssm_path),
    "ami_param": _text(_ssm_path),
    "region": _text(_pattern(r"[a-z]{2}(-[a-z]+)+-\d{1,2}", "not an AWS region name (e.g. us-east-1, eu-west-2)")),
    "bucket": _text(_bucket_name),
    "instance_profile": _text(
        _pattern(r"[A-Za-z0-9+=,.@_-]{1,128}", "not an IAM instance profile name (1-128 of letters, digits, +=,.@_-)")
    ),
    "security_group": _text(
        _pattern(
            r"(?!sg-)[A-Za-z0-9 ._:/()#,@\[\]+=&;{}!$*-]{1,255}",
            "not a security group name (1-255 characters, not starting with sg-)",
        )
    ),
    # gp3 root volumes: at least the size of the AMI's snapshot (8 GiB for Ubuntu), at most EBS's 16 TiB.
    "volume_gb": _count(8, 16384),
    "max_cost": _dollars(1_000_000),
    "hourly_price": _dollars(1_000),
    "sample_time_limit": _seconds(0, WEEK),
    "worker_setup": _text(_worker_setup),
    "worker_user": _text(
        _pattern(r"[a-z_][a-z0-9_-]{0,31}", "not a Linux user name (lowercase letters, digits, _ and -, up to 32)")
    ),
    "visibility_timeout": _seconds(1, SQS_MAX_VISIBILITY),
    "max_receive_count": _count(1, 1000),
    "retry_backoff": _seconds(0, SQS_MAX_VISIBILITY),
    "idle_timeout": _seconds(0, 24 * 3600),
    "max_replacements": _count(0, 1000),
    "stale_after": _seconds(1, WEEK),
    "silent_timeout": _seconds(1, WEEK),
    "no_sample_timeout": _seconds(1, WEEK),
    "heartbeat_interval": _seconds(1, 3600),
    "check_interval": _seconds(1, 3600),
    "resume": _text(_pattern(r"[0-9a-f]{12}", "not a fleet id (12 hex digits, as printed by ct-fleet eval)")),
}

# visibility_timeout must leave room for this many heartbeat intervals: the thread that
# extends a running job's visibility is the one that sends heartbeats, so a slow
# heartbeat call delays the extension (and a lapsed job is handed out twice).
VISIBILITY_HEARTBEATS = 2


@cache
def _adapter(name: str) -> TypeAdapter[Any]:
    from .config import Ec2Config

    hint = typing.get_type_hints(Ec2Config)[name]
    optional = type(None) in typing.get_args(hint)
    rule = RULES.get(name, hint)
    return TypeAdapter(rule | None if optional else rule)


def _reason(exc: ValidationError) -> str:
    error = exc.errors()[0]
    kind, ctx = error["type"], error.get("ctx") or {}
    words = {
        "int_parsing": "expected a whole number",
        "int_from_float": "expected a whole number",
        "int_type": "expected a whole number",
        "float_parsing": "expected a number",
        "float_type": "expected a number",
        "bool_parsing": "expected true or false",
        "bool_type": "expected true or false",
        "string_type": "expected text",
        "finite_number": "must be a finite number",
        "greater_than_equal": f"must be at least {ctx.get('ge')}",
        "greater_than": f"must be more than {ctx.get('gt')}",
        "less_than_equal": f"must be at most {ctx.get('le')}",
    }
    if kind in words:
        return words[kind]
    message = str(error["msg"])
    return message.removeprefix("Value error, ")


def shown(raw: Any) -> str:
    """A value as a one-line message may show it: control characters escaped, long ones cut."""
    text = str(raw)
    if not text.isprintable():
        text = repr(text)
    return text if len(text) <= 60 else text[:57] + "..."


def check_value(name: str, raw: Any, where: str = "--ec2-arg") -> Any:
    """The knob's value from a command line string or a YAML scalar; BadInput when it is not acceptable."""
    if isinstance(raw, (list, dict)):
        raise BadInput(
            f"{where} {name}: expected a single value, not a {'list' if isinstance(raw, list) else 'mapping'}"
        )
    try:
        return _adapter(name).validate_python(raw)
    except ValidationError as exc:
        raise BadInput(f"{where} {name}={shown(raw)}: {_reason(exc)}") from None


def check_config(cfg: Ec2Config) -> None:
    """Rules between knobs, on the final config (per-cloud defaults filled in)."""
    margin = VISIBILITY_HEARTBEATS * cfg.heartbeat_interval
    if cfg.visibility_timeout < margin:
        raise BadInput(
            f"visibility_timeout={cfg.visibility_timeout} must be at least {VISIBILITY_HEARTBEATS} x "
            f"heartbeat_interval ({margin}s) or running jobs get handed out twice: raise visibility_timeout "
            "or lower heartbeat_interval"
        )
    if cfg.resume and cfg.new_fleet:
        raise BadInput("resume=<fleet id> and new_fleet=true contradict each other: drop one")

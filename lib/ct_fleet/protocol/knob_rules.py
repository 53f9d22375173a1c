"""The value rules knobs are declared with: ranges, AWS's naming rules, and their wording.

protocol/knobs.py declares every knob with one of these rules (a pydantic type); this
module knows no knob. Every refusal is one line naming the knob, the value and what would
be accepted, raised before anything exists.
"""

from __future__ import annotations

import ipaddress
import math
import re
from collections.abc import Callable
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, Field, ValidationError

from ..error_lines import shown

SQS_MAX_VISIBILITY = 43200  # seconds; SQS's ceiling for VisibilityTimeout and ChangeMessageVisibility
WEEK = 7 * 24 * 3600


def pattern(regex: str, what: str) -> Callable[[str], str]:
    compiled = re.compile(regex)

    def check(value: str) -> str:
        if not compiled.fullmatch(value):
            raise ValueError(what)
        return value

    return check


def bucket_name(value: str) -> str:
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


def ssm_path(value: str) -> str:
    what = "not an SSM parameter path: /a/b/c of letters, digits and _.-"
    if not re.fullmatch(r"(/[A-Za-z0-9_.-]+){1,15}", value) or len(value) > 1011:
        raise ValueError(what)
    return value


def is_ssm_path(value: str) -> bool:
    try:
        ssm_path(value)
    except ValueError:
        return False
    return True


def ami(value: str) -> str:
    if value.startswith("ami-"):
        if not re.fullmatch(r"ami-([0-9a-f]{8}|[0-9a-f]{17})", value):
            raise ValueError("not an AMI id (ami- and 8 or 17 hex digits)")
        return value
    if value.startswith("/"):
        return ssm_path(value)
    raise ValueError("write an AMI id (ami-...) or the SSM parameter path that holds one (/...)")


def instance_type(value: str) -> str:
    if not re.fullmatch(r"[a-z][a-z0-9-]{0,19}\.[a-z0-9-]{1,20}", value):
        raise ValueError(
            f"{shown(value) or 'an empty name'} is not an EC2 instance type (family.size, e.g. c6i.4xlarge)"
        )
    return value


def subnet_id(value: str) -> str:
    if not re.fullmatch(r"subnet-([0-9a-f]{8}|[0-9a-f]{17})", value):
        raise ValueError(f"{shown(value) or 'an empty id'} is not a subnet id (subnet- and 8 or 17 hex digits)")
    return value


def listed(check: Callable[[str], str], most: int) -> Callable[[str], str]:
    """Comma-separated items, each passing `check`: none empty, none twice, at most `most`."""

    def check_all(value: str) -> str:
        items = [item.strip() for item in value.split(",")]
        for item in items:
            check(item)
        twice = sorted({item for item in items if items.count(item) > 1})
        if twice:
            raise ValueError(f"{', '.join(twice)} given twice")
        if len(items) > most:
            raise ValueError(f"at most {most} items, not {len(items)}")
        return ",".join(items)

    return check_all


def worker_setup(value: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)+", value) or len(value) > 512:
        raise ValueError("write <extra-src basename>/<path> with letters, digits and ._- in the names")
    if any(part in (".", "..") for part in value.split("/")):
        raise ValueError("the path must stay inside its extra-src tree (no . or .. parts)")
    return value


# The worker's own environment, not secrets: forwarded, they would replace the worker's
# values (PATH, HOME) with the launching machine's.
SYSTEM_VARIABLES = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "SHELL",
        "PWD",
        "OLDPWD",
        "TERM",
        "LANG",
        "LANGUAGE",
        "TZ",
        "TMPDIR",
        "HOSTNAME",
        "DISPLAY",
        "EDITOR",
        "PAGER",
        "MAIL",
        "SHLVL",
        "IFS",
        "PS1",
        "PS4",
        "PYTHONPATH",
        "PYTHONHOME",
        "VIRTUAL_ENV",
        "BASH_ENV",
        "ENV",
        "CDPATH",
        "XDG_RUNTIME_DIR",
    }
)
SYSTEM_PREFIXES = ("LC_", "LD_", "SSH_", "XDG_", "BASH_FUNC_", "DYLD_")


def secret_names(value: str) -> str:
    """NAME,... of variables to forward as secrets: names, none of them the system's own."""
    for name in (n.strip() for n in value.split(",")):
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,127}", name):
            raise ValueError(f"{shown(name) or 'an empty name'} is not a variable name (letters, digits and _)")
        if name in SYSTEM_VARIABLES or name.startswith(SYSTEM_PREFIXES):
            raise ValueError(
                f"{name} is a system variable of the worker's own, not a secret: forward only secrets (API keys, tokens)"
            )
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


def whole(low: int, high: int) -> Any:
    """A whole number (seconds, a count) from low to high."""
    return Annotated[int, BeforeValidator(_no_bool), Field(ge=low, le=high)]


def dollars(high: float) -> Any:
    return Annotated[float, BeforeValidator(_finite), Field(gt=0, le=high, allow_inf_nan=False)]


def text(check: Callable[[str], str]) -> Any:
    return Annotated[str, AfterValidator(check)]


def reason(exc: ValidationError) -> str:
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

"""`-T key=value` and `-M key=value`: task and model arguments, as `inspect eval` reads them.

Values are YAML scalars (`-T n=3` is the int 3, `-T flag=true` a bool), and an unquoted
value with commas is a list (`-T envs=web,ops`), as in Inspect's own -T. Dashes in keys
become underscores. Unlike Inspect, a pair without `=` is an error, not silently dropped,
and so are YAML anchors and aliases (a few bytes of them expand to gigabytes), values over
MAX_VALUE_BYTES and whole numbers beyond 64 bits.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ...errors import BadInput
from . import safe_yaml

KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# One value; every job's work message carries all of them (SQS takes 256 KiB a message).
MAX_VALUE_BYTES = 32 << 10


def _value(raw: str, flag: str, key: str) -> Any:
    size = len(raw.encode())
    if size > MAX_VALUE_BYTES:
        raise BadInput(
            f"{flag} {key}=...: {size:,} bytes is over the {MAX_VALUE_BYTES:,}-byte limit of one value "
            "(each job's message carries it); have the task read big inputs from a file"
        )
    value, plain = safe_yaml.load_value(raw, f"{flag} {key}")
    if isinstance(value, str) and plain and "," in value:
        return value.split(",")
    return value


def parse_kv(pairs: Sequence[str], flag: str) -> dict[str, Any]:
    args: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not KEY_RE.match(key):
            raise BadInput(f"{flag} {pair!r}: write {flag} key=value (an argument name, then its value)")
        args[key] = _value(raw, flag, key)
    return args


def merge_policy(policy: str, task_args: dict[str, Any]) -> dict[str, Any]:
    """The task_args a job runs with: the policy first, then the -T pairs."""
    if "policy" in task_args:
        raise BadInput("-T policy=...: choose the policy with --policy")
    return {"policy": policy, **task_args}

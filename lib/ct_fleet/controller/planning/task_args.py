"""`-T key=value` and `-M key=value`: task and model arguments, as `inspect eval` reads them.

Values are YAML scalars (`-T n=3` is the int 3, `-T flag=true` a bool), and an unquoted
value with commas is a list (`-T envs=web,ops`), as in Inspect's own -T. Dashes in keys
become underscores. Unlike Inspect, a pair without `=` is an error, not silently dropped.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import yaml

from ...errors import BadInput

KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _value(raw: str) -> Any:
    try:
        node = yaml.compose(raw, Loader=yaml.SafeLoader)
        value = yaml.safe_load(raw)
    except yaml.YAMLError:
        # Inspect would fail on it too; a plain string is what the user typed.
        return raw
    if isinstance(value, str) and isinstance(node, yaml.ScalarNode) and node.style is None and "," in value:
        return value.split(",")
    return value


def parse_kv(pairs: Sequence[str], flag: str) -> dict[str, Any]:
    args: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not KEY_RE.match(key):
            raise BadInput(f"{flag} {pair!r}: write {flag} key=value (an argument name, then its value)")
        args[key] = _value(raw)
    return args


def parse_task_args(pairs: Sequence[str]) -> dict[str, Any]:
    return parse_kv(pairs, "-T")


def merge_policy(policy: str, task_args: dict[str, Any]) -> dict[str, Any]:
    """The task_args a job runs with: the policy first, then the -T pairs."""
    if "policy" in task_args:
        raise BadInput("-T policy=...: choose the policy with --policy")
    return {"policy": policy, **task_args}

"""The fleet.env contract: the settings a worker boots with, one set of names and defaults.

The controller renders fleet.env (to_env_file) into user-data; user-data writes it to
/etc/linuxbench/fleet.env (so a step can be rerun by hand); the bash steps source that file
and the Python worker reads the same names from its environment (from_env). No value is a
secret: secrets travel in a per-instance SSM SecureString; SECRET_NAMES names them.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import Field, dataclass, field, fields
from typing import Any

from ..errors import BadInput
from .knob_env import check_worker_types, from_worker_env, to_worker_env
from .knobs import DEFAULT_REGION, Ec2Config

# Concurrent samples a worker starts with; it adapts from there up to CONCURRENCY.
START_CONCURRENCY = 10
# What a name in fleet.env may be: a shell variable name of the protocol's style.
NAME_RE = re.compile(r"[A-Z][A-Z0-9_]*")


@dataclass(frozen=True)
class FleetEnv:
    FLEET_ID: str
    # The knobs that reach workers travel under their fleet.env names (protocol/knobs.py).
    knobs: Ec2Config = field(default_factory=lambda: Ec2Config().for_cloud("aws", DEFAULT_REGION))
    CODE_SHA: str = ""
    SETTINGS: str = ""
    SETTING_REQUIREMENTS: str = ""  # pip requirements, space-separated (none holds a space)
    SETTING_WHEEL_KEYS: str = ""  # S3 keys of wheels shipped with the fleet
    SECRET_NAMES: str = ""
    SECRET_PREFIX: str = ""
    DOCKER_ORG_NAME_SSM_PARAM: str = ""
    DOCKER_ORG_PAT_SSM_PARAM: str = ""
    DOCKER_REGISTRY: str = ""  # empty: Docker Hub
    EXTRA_SRC_KEYS: str = ""

    def __post_init__(self) -> None:
        # A value of the wrong type would reach the worker as its str(): refused instead.
        for f in _own_fields():
            value = getattr(self, f.name)
            if type(value) is not str:
                raise BadInput(f"fleet setting {f.name}={value!r} is not text")
        check_worker_types(self.knobs)
        for name, value in self.to_env().items():
            if "\0" in value:
                raise BadInput(f"fleet setting {name} holds a NUL character, which no environment can carry")

    def to_env(self) -> dict[str, str]:
        """Name -> text for user-data; empty optional values are left out."""
        out = {f.name: getattr(self, f.name) for f in _own_fields() if getattr(self, f.name) != ""}
        return {**out, **to_worker_env(self.knobs)}

    def to_env_file(self) -> str:
        """fleet.env: one `export NAME='value'` line per value of to_env(), shell-quoted, so
        that sourcing it sets each value exactly as it is (newlines, quotes, `$(...)` and all)."""
        lines = []
        for name, value in self.to_env().items():
            if not NAME_RE.fullmatch(name):
                raise BadInput(f"fleet setting name {name!r} is not of the form {NAME_RE.pattern}")
            lines.append(f"export {name}={shlex.quote(value)}\n")
        return "".join(lines)

    @classmethod
    def from_env(cls, env: Mapping[str, str], knobs: type[Ec2Config] = Ec2Config) -> "FleetEnv":
        """Read the contract back from an environment; absent values take the defaults."""
        values = {f.name: env[f.name] for f in _own_fields() if env.get(f.name)}
        return cls(knobs=from_worker_env(env, knobs), **values)


def _own_fields() -> list[Field[Any]]:
    """FleetEnv's own values: all text (the knobs have theirs in protocol/knobs.py)."""
    return [f for f in fields(FleetEnv) if f.name != "knobs"]

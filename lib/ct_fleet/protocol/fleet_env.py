"""The fleet.env contract: the settings a worker boots with, one set of names and defaults.

The controller renders fleet.env (to_env_file) into user-data; user-data writes it to
/etc/linuxbench/fleet.env (so a step can be rerun by hand); the bash steps source that file
and the Python worker reads the same names from its environment (from_env). No value is a
secret: secrets travel as per-instance SSM SecureStrings named in SECRET_NAMES.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, fields

from ..errors import BadInput

# Defaults used when a value is absent (a step rerun by hand with a partial fleet.env).
# The controller always writes every value; these are the EC2 defaults.
DEFAULT_CONCURRENCY = 20
DEFAULT_IDLE_TIMEOUT = 60
DEFAULT_VISIBILITY_TIMEOUT = 120
DEFAULT_HEARTBEAT_INTERVAL = 30
DEFAULT_RETRY_BACKOFF = 30
DEFAULT_REGION = "us-east-1"
# Concurrent samples a worker starts with; it adapts from there up to CONCURRENCY.
START_CONCURRENCY = 10
# What a name in fleet.env may be: a shell variable name of the protocol's style.
NAME_RE = re.compile(r"[A-Z][A-Z0-9_]*")
_TYPES = {"str": str, "int": int, "bool": bool}


@dataclass(frozen=True)
class FleetEnv:
    FLEET_ID: str
    BUCKET: str
    CODE_SHA: str = ""
    AWS_REGION: str = DEFAULT_REGION
    CONCURRENCY: int = DEFAULT_CONCURRENCY
    IDLE_TIMEOUT: int = DEFAULT_IDLE_TIMEOUT
    VISIBILITY_TIMEOUT: int = DEFAULT_VISIBILITY_TIMEOUT
    HEARTBEAT_INTERVAL: int = DEFAULT_HEARTBEAT_INTERVAL
    RETRY_BACKOFF: int = DEFAULT_RETRY_BACKOFF
    SETTINGS: str = ""
    SETTING_REQUIREMENTS: str = ""  # pip requirements, space-separated (none holds a space)
    SETTING_WHEEL_KEYS: str = ""  # S3 keys of wheels shipped with the fleet
    SECRET_NAMES: str = ""
    SECRET_PREFIX: str = ""
    SPOT: bool = False
    DOCKER_ORG_NAME_SSM_PARAM: str = ""
    DOCKER_ORG_PAT_SSM_PARAM: str = ""
    DOCKER_REGISTRY: str = ""  # empty: Docker Hub
    EXTRA_SRC_KEYS: str = ""
    WORKER_USER: str = ""
    WORKER_SETUP: str = ""
    # Inspect jobs run in children forked from a process that has inspect_ai imported and
    # the task built (worker/warm.py), started with the worker; false: a fresh interpreter
    # per job (and no such process: a fleet of command jobs).
    WARM_RUNNER: bool = True
    # MB of RSS one job's process tree may use before it is killed; 0: half the machine's.
    JOB_MEMORY_MB: int = 0

    def __post_init__(self) -> None:
        # A value of the wrong type would reach the worker as its str(): refused instead.
        for f in fields(self):
            value = getattr(self, f.name)
            want = _TYPES[f.type] if isinstance(f.type, str) else f.type
            if type(value) is not want:
                raise BadInput(f"fleet setting {f.name}={value!r} is not a {want.__name__}")
            if isinstance(value, str) and "\0" in value:
                raise BadInput(f"fleet setting {f.name} holds a NUL character, which no environment can carry")

    def to_env(self) -> dict[str, str]:
        """Name -> text for user-data; empty optional values are left out."""
        out: dict[str, str] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool):
                out[f.name] = "true" if value else "false"
            elif value != "":
                out[f.name] = str(value)
        return out

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
    def from_env(cls, env: Mapping[str, str]) -> "FleetEnv":
        """Read the contract back from an environment; absent values take the defaults."""
        values: dict[str, object] = {}
        for f in fields(cls):
            raw = env.get(f.name)
            if raw is None or raw == "":
                continue
            if f.type in ("int", int):
                values[f.name] = int(raw)
            elif f.type in ("bool", bool):
                values[f.name] = raw.strip().lower() == "true"
            else:
                values[f.name] = raw
        return cls(**values)  # type: ignore[arg-type]

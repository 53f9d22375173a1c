"""The fleet.env contract: the settings a worker boots with, one set of names and defaults.

The controller renders them into user-data; user-data writes them to
/etc/linuxbench/fleet.env (so a step can be rerun by hand); the bash steps source that file
and the Python worker reads the same names from its environment. No value is a secret:
secrets travel as per-instance SSM SecureStrings named in SECRET_NAMES.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields

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
    EXTRA_SRC_KEYS: str = ""
    WORKER_USER: str = ""
    WORKER_SETUP: str = ""

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

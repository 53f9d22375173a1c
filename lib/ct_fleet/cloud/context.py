"""Where a started cloud is and who we are there: passed to what talks to it, never put in
this process's environment."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CloudContext:
    region: str
    endpoint_url: str | None = None  # None: AWS's own endpoints
    profile: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = None
    session_token: str | None = None

    def client_args(self) -> dict[str, Any]:
        """Keyword arguments of services.session.client for this cloud."""
        return {
            "region": self.region,
            "profile": self.profile,
            "endpoint_url": self.endpoint_url,
            "access_key_id": self.access_key_id,
            "secret_access_key": self.secret_access_key,
            "session_token": self.session_token,
        }

    def env(self) -> dict[str, str]:
        """The AWS_* variables a process we start (a local instance, the AWS CLI) needs to
        reach this cloud as we do."""
        values = {
            "AWS_REGION": self.region,
            "AWS_DEFAULT_REGION": self.region,
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "AWS_PROFILE": self.profile,
            "AWS_ACCESS_KEY_ID": self.access_key_id,
            "AWS_SECRET_ACCESS_KEY": self.secret_access_key,
            "AWS_SESSION_TOKEN": self.session_token,
        }
        return {k: v for k, v in values.items() if v}


# What a started cloud's context replaces in a child's environment.
AWS_IDENTITY_VARS = (
    "AWS_ENDPOINT_URL",
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
)

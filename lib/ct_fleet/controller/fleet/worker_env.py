"""The fleet's fleet.env: what a worker boots with. Names and knobs, never a secret value."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from ...cloud import Cloud
from ...protocol import FleetEnv, secrets_prefix
from ..planning import FleetSpec, docker_auth_params, docker_registry


def fleet_env(
    spec: FleetSpec,
    cloud: Cloud,
    secrets: Mapping[str, str],
    extra_keys: list[str],
    wheel_keys: list[str] | None = None,
    environ: Mapping[str, str] | None = None,
    registry_auth: bool = True,
) -> FleetEnv:
    """`registry_auth`: whether the registry credentials' SSM parameters may exist (False:
    the controller saw that they do not, so no worker asks SSM for them at boot)."""
    env = dict(environ or {})
    docker_name, docker_pat = docker_auth_params(env) if registry_auth else ("", "")
    # A fleet of command jobs has no use for a process with inspect_ai imported.
    knobs = replace(spec.config, region=cloud.region, warm_runner=spec.config.warm_runner and not spec.command)
    return FleetEnv(
        FLEET_ID=spec.fleet_id,
        knobs=knobs,
        CODE_SHA=spec.code_sha,
        SETTINGS=" ".join(spec.settings),
        SETTING_REQUIREMENTS=" ".join(r for r in spec.setting_requirements if not r.endswith(".whl")),
        SETTING_WHEEL_KEYS=" ".join(wheel_keys or []),
        SECRET_NAMES=" ".join(sorted(secrets)),
        SECRET_PREFIX=secrets_prefix(spec.fleet_id),
        DOCKER_ORG_NAME_SSM_PARAM=docker_name,
        DOCKER_ORG_PAT_SSM_PARAM=docker_pat,
        DOCKER_REGISTRY=docker_registry(env),
        EXTRA_SRC_KEYS=" ".join(extra_keys),
    )

"""Per-instance SSM SecureStrings: how API keys reach workers without touching user-data.

Each launched instance gets one parameter, {prefix}/{instance_id}/secrets, holding every
secret as JSON: one PutParameter per worker, whatever the number of secrets. Secrets that
overflow a standard parameter's 4 KB go on in secrets.1, secrets.2, ... Each is tagged
with the instance ARN so the worker role's policy can allow reading only its own. All are
deleted at teardown.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from botocore.exceptions import BotoCoreError, ClientError

from ..errors import BadInput
from ..protocol import secret_bundle, secrets_prefix

if TYPE_CHECKING:
    from mypy_boto3_ssm import SSMClient

# A standard-tier value is at most 4 KB; advanced parameters (8 KB) are billed per month.
VALUE_LIMIT = 4096
# The worker reads the overflow in one GetParameters call, which takes at most 10 names.
MAX_BUNDLES = 11


def _encode(of: int, secrets: Mapping[str, str]) -> str:
    return json.dumps({"of": of, "secrets": dict(secrets)}, ensure_ascii=False, separators=(",", ":"))


def _size(of: int, secrets: Mapping[str, str]) -> int:
    return len(_encode(of, secrets).encode())


def bundles(secrets: Mapping[str, str]) -> list[str]:
    """The parameter values that carry `secrets`, first-fit in name order, each within 4 KB.

    Raises BadInput, naming the secret, when one alone cannot fit or all of them need more
    parameters than a worker reads.
    """
    if not secrets:
        return []
    packed: list[dict[str, str]] = []
    # "of" is written with as many digits as it can take, so a later count never overflows.
    for name in sorted(secrets):
        value = secrets[name]
        if _size(MAX_BUNDLES, {name: value}) > VALUE_LIMIT:
            raise BadInput(
                f"secret {name} is {len(value.encode())} bytes; a worker secret must fit in one "
                f"{VALUE_LIMIT}-byte SSM parameter: pass a shorter value, or leave it out of the run's environment"
            )
        for bundle in packed:
            if _size(MAX_BUNDLES, {**bundle, name: value}) <= VALUE_LIMIT:
                bundle[name] = value
                break
        else:
            packed.append({name: value})
    if len(packed) > MAX_BUNDLES:
        raise BadInput(
            f"the run's secrets ({', '.join(sorted(secrets))}) need {len(packed)} SSM parameters of "
            f"{VALUE_LIMIT} bytes each, more than the {MAX_BUNDLES} a worker reads: forward fewer or shorter secrets"
        )
    return [_encode(len(packed), bundle) for bundle in packed]


def put_for_instances(
    ssm: SSMClient, fleet_id: str, instance_ids: Sequence[str], secrets: Mapping[str, str], *, account: str, region: str
) -> None:
    values = bundles(secrets)
    for instance_id in instance_ids:
        arn = f"arn:aws:ec2:{region}:{account}:instance/{instance_id}"
        for index, value in enumerate(values):
            param = secret_bundle(fleet_id, instance_id, index)
            try:
                ssm.put_parameter(
                    Name=param,
                    Value=value,
                    Type="SecureString",
                    Tags=[{"Key": "InstanceArn", "Value": arn}, {"Key": "FleetId", "Value": fleet_id}],
                )
            except ssm.exceptions.ParameterAlreadyExists:
                # A retried call whose first attempt did land (a 5xx after the write): the
                # tags are there already, and AWS refuses Tags together with Overwrite.
                ssm.put_parameter(Name=param, Value=value, Type="SecureString", Overwrite=True)


def delete_fleet_secrets(ssm: SSMClient, fleet_id: str) -> int:
    names: list[str] = []
    paginator = ssm.get_paginator("get_parameters_by_path")
    try:
        for page in paginator.paginate(Path=secrets_prefix(fleet_id), Recursive=True):
            names.extend(p["Name"] for p in page["Parameters"])
    except ClientError:
        return 0
    for start in range(0, len(names), 10):
        ssm.delete_parameters(Names=names[start : start + 10])
    return len(names)


def parameter_exists(ssm: SSMClient, name: str) -> bool | None:
    """Is there a parameter `name` (its value undecrypted, unread)? None when SSM will not
    say (no permission, throttled past the retries): the caller then assumes it may."""
    try:
        ssm.get_parameter(Name=name)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") == "ParameterNotFound":
            return False
        return None
    except BotoCoreError:
        return None
    return True

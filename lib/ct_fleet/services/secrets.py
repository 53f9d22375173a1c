"""Per-instance SSM SecureStrings: how API keys reach workers without touching user-data.

Each launched instance gets its own copy under {prefix}/{instance_id}/{NAME}, tagged with
the instance ARN so the worker role's policy can allow reading only its own. All are
deleted at teardown.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from botocore.exceptions import ClientError

from ..protocol import secret_param, secrets_prefix

if TYPE_CHECKING:
    from mypy_boto3_ssm import SSMClient


def put_for_instances(
    ssm: SSMClient, fleet_id: str, instance_ids: Sequence[str], secrets: Mapping[str, str], *, account: str, region: str
) -> None:
    for instance_id in instance_ids:
        arn = f"arn:aws:ec2:{region}:{account}:instance/{instance_id}"
        for name, value in secrets.items():
            param = secret_param(fleet_id, instance_id, name)
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

"""Keep-one rotation of the worker AMI in SSM: new id first, then deregister the old AMI and delete its snapshots."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from botocore.exceptions import ClientError

from .common import BUILD_TAG, COMPONENT, DEFAULT_PARAM, LIVE_STATES, MANAGED_BY, PARAM_TAG, AmiError, _code

if TYPE_CHECKING:
    from mypy_boto3_ec2 import EC2Client
    from mypy_boto3_ec2.type_defs import DescribeImagesRequestTypeDef, FilterTypeDef, ImageTypeDef
    from mypy_boto3_ssm import SSMClient
    from mypy_boto3_sts import STSClient


def current_ami_id(ssm: SSMClient, param: str = DEFAULT_PARAM) -> str | None:
    """The AMI id stored in SSM, or None when there is none yet."""
    try:
        value = ssm.get_parameter(Name=param)["Parameter"]["Value"].strip()
    except ClientError as exc:
        if _code(exc) == "ParameterNotFound":
            return None
        raise
    return value or None


def describe_image(ec2: EC2Client, ami_id: str, *, own: bool = False) -> ImageTypeDef | None:
    """The image, or None when it does not exist (or is not ours when own=True)."""
    kwargs: DescribeImagesRequestTypeDef = {"ImageIds": [ami_id]}
    if own:
        kwargs["Owners"] = ["self"]
    try:
        images = ec2.describe_images(**kwargs).get("Images", [])
    except ClientError as exc:
        if _code(exc).startswith("InvalidAMIID"):
            return None
        raise
    images = [i for i in images if i.get("State") != "deregistered"]
    return images[0] if images else None


def image_snapshot_ids(ec2: EC2Client, image: ImageTypeDef) -> list[str]:
    """Every EBS snapshot behind an image: its block device mappings, the snapshots
    CreateImage described as "... for ami-...", and those tagged with its build id."""
    ids: list[str] = []

    def add(snapshot_id: str | None) -> None:
        if snapshot_id and snapshot_id not in ids:
            ids.append(snapshot_id)

    for mapping in image.get("BlockDeviceMappings", []):
        add(mapping.get("Ebs", {}).get("SnapshotId"))
    filters: list[list[FilterTypeDef]] = [[{"Name": "description", "Values": [f"*{image['ImageId']}*"]}]]
    build_id = _tags(image).get(BUILD_TAG)
    if build_id:
        filters.append([{"Name": f"tag:{BUILD_TAG}", "Values": [build_id]}])
    paginator = ec2.get_paginator("describe_snapshots")
    for flt in filters:
        for page in paginator.paginate(OwnerIds=["self"], Filters=flt):
            for snapshot in page.get("Snapshots", []):
                add(snapshot["SnapshotId"])
    return ids


def _tags(resource: ImageTypeDef) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in resource.get("Tags", []) or []}


def _images_tagged(ec2: EC2Client, **tags: str) -> list[ImageTypeDef]:
    filters: list[FilterTypeDef] = [{"Name": f"tag:{k}", "Values": [v]} for k, v in tags.items()]
    images = ec2.describe_images(Owners=["self"], Filters=filters).get("Images", [])
    return [i for i in images if i.get("State") != "deregistered"]


@dataclass
class RotateResult:
    new_ami_id: str
    previous_ami_id: str | None
    deregistered: list[str] = field(default_factory=list)
    deleted_snapshots: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def remove_image(ec2: EC2Client, image: ImageTypeDef, result: RotateResult, *, snapshot_wait: float = 60.0) -> None:
    """Deregister an image, then delete its snapshots (AWS refuses to delete a snapshot
    while a registered image uses it; moto never deletes them on deregistration)."""
    ami_id = image["ImageId"]
    snapshots = image_snapshot_ids(ec2, image)  # before deregistering: the mapping goes with it
    try:
        ec2.deregister_image(ImageId=ami_id)
        result.deregistered.append(ami_id)
    except ClientError as exc:
        if not _code(exc).startswith("InvalidAMIID"):
            result.errors.append(f"deregister {ami_id}: {exc}")
            return
    for snapshot_id in snapshots:
        deadline = time.monotonic() + snapshot_wait
        while True:
            try:
                ec2.delete_snapshot(SnapshotId=snapshot_id)
                result.deleted_snapshots.append(snapshot_id)
                break
            except ClientError as exc:
                code = _code(exc)
                if code == "InvalidSnapshot.NotFound":
                    break
                if code == "InvalidSnapshot.InUse" and time.monotonic() < deadline:
                    time.sleep(5)  # deregistration takes a moment to release it
                    continue
                result.errors.append(f"delete snapshot {snapshot_id} of {ami_id}: {exc}")
                break


def rotate(
    ec2: EC2Client, ssm: SSMClient, new_ami_id: str, param: str = DEFAULT_PARAM, *, sweep: bool = True
) -> RotateResult:
    """Make `new_ami_id` the worker AMI and keep only it.

    Order: check the new AMI is available -> write it to SSM (Overwrite) -> deregister
    the previous AMI -> delete its snapshots. Workers launched at any moment read an id
    that exists. With `sweep`, older AMIs tagged for the same parameter (left by a build
    that failed between registering and rotating) go too; newer ones, from a build still
    running elsewhere, are spared.
    """
    new = describe_image(ec2, new_ami_id)
    if new is None or new.get("State") != "available":
        state = new.get("State") if new else "missing"
        raise AmiError(f"new AMI {new_ami_id} is {state}: SSM {param} left unchanged")
    previous = current_ami_id(ssm, param)
    ssm.put_parameter(
        Name=param,
        Value=new_ami_id,
        Type="String",
        Overwrite=True,
        Description="ct-fleet worker AMI (written by bin/build-ami)",
    )
    result = RotateResult(new_ami_id, previous)
    doomed: dict[str, ImageTypeDef] = {}
    if previous and previous != new_ami_id:
        old = describe_image(ec2, previous, own=True)
        if old is None:
            result.warnings.append(f"previous AMI {previous} is gone or not owned by this account: left alone")
        else:
            doomed[previous] = old
    if sweep:
        for image in _images_tagged(ec2, ManagedBy=MANAGED_BY, Component=COMPONENT, **{PARAM_TAG: param}):
            if image["ImageId"] != new_ami_id and image.get("CreationDate", "") <= new.get("CreationDate", ""):
                doomed.setdefault(image["ImageId"], image)
    for image in doomed.values():
        remove_image(ec2, image, result)
    return result


def discard_build_images(ec2: EC2Client, build_id: str, keep: Iterable[str] = ()) -> RotateResult:
    """Remove AMIs (and snapshots) registered by a build that then failed."""
    result = RotateResult(new_ami_id="", previous_ami_id=None)
    keep = set(keep)
    images = {i["ImageId"]: i for i in _images_tagged(ec2, **{BUILD_TAG: build_id})}
    # Packer tags the AMI only once it is available; its description names the build
    # from the start (ami_description in packer/worker-ami.pkr.hcl).
    untagged = ec2.describe_images(
        Owners=["self"], Filters=[{"Name": "description", "Values": [f"*build {build_id})"]}]
    ).get("Images", [])
    for image in untagged:
        images.setdefault(image["ImageId"], image)
    for ami_id, image in images.items():
        if ami_id not in keep and image.get("State") != "deregistered":
            remove_image(ec2, image, result)
    return result


def cleanup_builders(ec2: EC2Client, build_id: str) -> list[str]:
    """Terminate every live instance tagged with this build's id; returns their ids."""
    ids: list[str] = []
    paginator = ec2.get_paginator("describe_instances")
    filters: list[FilterTypeDef] = [
        {"Name": f"tag:{BUILD_TAG}", "Values": [build_id]},
        {"Name": "instance-state-name", "Values": LIVE_STATES},
    ]
    for page in paginator.paginate(Filters=filters):
        for reservation in page.get("Reservations", []):
            ids.extend(i["InstanceId"] for i in reservation.get("Instances", []))
    if ids:
        ec2.terminate_instances(InstanceIds=ids)
    return ids


def launched_by(sts: STSClient) -> str:
    """The caller's LaunchedBy value: the last segment of its ARN (IAM user name, or the
    session name of an assumed role, which Identity Center sets to the user name)."""
    arn: str = sts.get_caller_identity()["Arn"]
    return arn.rsplit("/", 1)[-1]

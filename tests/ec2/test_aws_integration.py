"""Queues, store, fleet and secrets against a moto server over HTTP (real boto3 calls)."""

from __future__ import annotations

import base64
import json
import re
import uuid
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest

from ct_fleet.errors import BadInput
from ct_fleet.evallog import digest
from ct_fleet.protocol import Ec2Config, FleetEnv, Manifest, ManifestJob, ManifestTask, secret_bundle, secrets_prefix
from ct_fleet.protocol.user_data import USER_DATA_LIMIT, render_user_data
from ct_fleet.services import instances as fleet
from ct_fleet.services import launching, queues, secrets, session, store
from testkit.faultproxy import FaultProxy, FaultRule
from testkit.fleet import launch_workers


def _fid() -> str:
    return uuid.uuid4().hex[:12]


def test_queues_redrive_to_the_dlq_after_max_receives(aws_client):
    sqs = aws_client("sqs")
    q = queues.ensure_queues(sqs, _fid(), visibility_timeout=30, max_receive_count=2)
    attrs = sqs.get_queue_attributes(QueueUrl=q.work, AttributeNames=["RedrivePolicy"])["Attributes"]
    assert json.loads(attrs["RedrivePolicy"])["maxReceiveCount"] in (2, "2")
    queues.send_batch(sqs, q.work, ["poison"])
    for _ in range(2):
        (msg,) = queues.receive(sqs, q.work, wait=1)
        queues.change_visibility_batch(sqs, q.work, [msg["ReceiptHandle"]], 0)
    assert queues.receive(sqs, q.work, wait=1) == []  # moved on this receive
    (dead,) = queues.receive(sqs, q.dlq, wait=1)
    assert dead["Body"] == "poison"


def test_large_messages_are_sent_in_batches_sqs_accepts(aws_client):
    """Ten bodies of 120 KiB, each one within SQS's limit: in one SendMessageBatch, BatchRequestTooLong."""
    sqs = aws_client("sqs")
    q = queues.ensure_queues(sqs, _fid(), visibility_timeout=30, max_receive_count=3)
    bodies = [f"{i:02d}" + "x" * (120 << 10) for i in range(10)]
    assert queues.send_batch(sqs, q.work, bodies) == 10
    seen = []
    while got := queues.receive(sqs, q.work, wait=0):
        seen += [m["Body"][:2] for m in got]
        queues.delete_batch(sqs, q.work, [m["ReceiptHandle"] for m in got])
    assert sorted(seen) == [f"{i:02d}" for i in range(10)]


def test_batched_send_receive_delete_moves_every_message_once(aws_client):
    sqs = aws_client("sqs")
    q = queues.ensure_queues(sqs, _fid(), visibility_timeout=30, max_receive_count=3)
    bodies = [f"job-{i}" for i in range(37)]
    assert queues.send_batch(sqs, q.work, bodies) == 37
    seen = []
    while True:
        got = queues.receive(sqs, q.work, wait=0)
        if not got:
            break
        seen += [m["Body"] for m in got]
        queues.delete_batch(sqs, q.work, [m["ReceiptHandle"] for m in got])
    assert sorted(seen) == sorted(bodies)
    assert queues.depths(sqs, q)["work"] == 0
    assert queues.find_queues(sqs, q.work.rsplit("lb-fleet-", 1)[1][:-5]) == q
    queues.delete_queues(sqs, q)
    assert queues.find_queues(sqs, "nonexistent0") is None


def test_a_depth_answer_without_its_figures_is_no_count(aws_client, moto_server):
    """GetQueueAttributes may answer without Attributes (AWS omits members with no value; the
    embedded cloud's moto answered so once, to a controller just resumed from SIGSTOP on a
    loaded machine, and the run crashed on it): that queue has no depth this time, not a
    depth of 0 (an empty work queue tells workers the run's tail has come)."""
    sqs = aws_client("sqs")
    q = queues.ensure_queues(sqs, _fid(), visibility_timeout=30, max_receive_count=3)
    queues.send_batch(sqs, q.work, ["job"])
    rule = FaultRule("sqs:GetQueueAttributes", "empty", rate=1.0, limit=1)
    with FaultProxy(moto_server.endpoint_url, [rule]) as proxy:
        blank = session.client("sqs", endpoint_url=proxy.endpoint_url, region_name="us-east-1")
        assert queues.depths(blank, q, roles=("work",)) == {}
        assert queues.depths(blank, q, roles=("work",)) == {"work": 1, "work_in_flight": 0}
    queues.delete_queues(sqs, q)


def test_result_listing_pages_and_ignores_logs(aws_client, tmp_path: Path):
    s3 = aws_client("s3")
    bucket = f"b-{_fid()}"
    store.ensure_bucket(s3, bucket, create=True)
    fid = _fid()
    for i in range(1005):
        s3.put_object(Bucket=bucket, Key=f"{fid}/job{i:04d}.eval", Body=b"x")
    s3.put_object(Bucket=bucket, Key=f"{fid}/logs/i-1-bootstrap.log", Body=b"log")
    s3.put_object(Bucket=bucket, Key=f"{fid}/manifest.json", Body=b"{}")
    found = store.list_result_job_ids(s3, bucket, fid)
    assert len(found) == 1005 and "job1004" in found
    # A result that is not a finished .eval is refused and not left behind.
    assert store.download_result(s3, bucket, f"{fid}/job0001.eval", tmp_path / "job0001.eval") is None
    assert not (tmp_path / "job0001.eval").exists()


def test_a_result_that_reads_comes_with_the_digest_of_its_bytes(aws_client, tmp_path: Path):
    s3 = aws_client("s3")
    bucket, fid = f"b-{_fid()}", _fid()
    store.ensure_bucket(s3, bucket, create=True)
    log = tmp_path / "up.eval"
    with zipfile.ZipFile(log, "w") as zf:
        zf.writestr("header.json", json.dumps({"status": "success", "eval": {"task": "t"}}))
        zf.writestr("samples/1_epoch_1.json", json.dumps({"id": 1, "epoch": 1}))
    s3.put_object(Bucket=bucket, Key=f"{fid}/job0001.eval", Body=log.read_bytes())
    dest = tmp_path / "down" / "job0001.evaljob"
    got = store.download_result(s3, bucket, f"{fid}/job0001.eval", dest)
    assert got is not None and got == digest(dest) and dest.read_bytes() == log.read_bytes()


def test_a_result_is_stored_once_and_a_second_attempt_leaves_the_first(aws_client, tmp_path: Path):
    s3 = aws_client("s3")
    bucket, key = f"b-{_fid()}", f"{_fid()}/job0001.eval"
    store.ensure_bucket(s3, bucket, create=True)
    first, second = tmp_path / "first.eval", tmp_path / "second.eval"
    first.write_bytes(b"the first attempt's result")
    second.write_bytes(b"a second attempt's result")
    assert store.upload_result(s3, bucket, key, first) is True
    assert store.upload_result(s3, bucket, key, second) is False
    assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == first.read_bytes()
    s3.delete_object(Bucket=bucket, Key=key)  # as the controller does before a job runs again
    assert store.upload_result(s3, bucket, key, second) is True


def test_missing_bucket_is_bad_input_on_aws(aws_client):
    with pytest.raises(BadInput, match="does not exist"):
        store.ensure_bucket(aws_client("s3"), f"missing-{_fid()}", create=False)


def test_manifest_and_artifact_round_trip(aws_client, tmp_path: Path):
    s3 = aws_client("s3")
    bucket = f"b-{_fid()}"
    store.ensure_bucket(s3, bucket, create=True)
    assert store.get_manifest(s3, bucket, "f1") is None
    manifest = Manifest(
        "f1",
        "mockllm/model",
        1,
        "sha",
        [ManifestTask("k1", "t", "t.py@t", {"policy": "honest"}, ["s1", 2])],
        [ManifestJob("j1", "k1", "s1", 1), ManifestJob("j2", "k1", 2, 1)],
        policy="honest",
    )
    store.put_manifest(s3, bucket, manifest)
    assert store.get_manifest(s3, bucket, "f1") == manifest
    tarball = tmp_path / "code.tar.gz"
    tarball.write_bytes(b"tar")
    assert store.upload_artifact(s3, bucket, "sha1", tarball) is True
    assert store.upload_artifact(s3, bucket, "sha1", tarball) is False  # once per SHA


def _image(ec2) -> str:
    return ec2.register_image(Name=f"img-{_fid()}", RootDeviceName="/dev/sda1")["ImageId"]


def _profile(aws_client, name: str) -> None:
    iam = aws_client("iam")
    iam.create_role(RoleName=name, AssumeRolePolicyDocument="{}")
    iam.create_instance_profile(InstanceProfileName=name)
    iam.add_role_to_instance_profile(InstanceProfileName=name, RoleName=name)


def test_launch_tags_profile_shutdown_and_no_ingress(aws_client):
    ec2 = aws_client("ec2")
    profile = f"p-{_fid()}"
    _profile(aws_client, profile)
    group = fleet.ensure_security_group(ec2, f"sg-{_fid()}")
    assert (
        fleet.ensure_security_group(
            ec2, ec2.describe_security_groups(GroupIds=[group])["SecurityGroups"][0]["GroupName"]
        )
        == group
    )
    assert ec2.describe_security_groups(GroupIds=[group])["SecurityGroups"][0]["IpPermissions"] == []
    fid = _fid()
    user_data = render_user_data(
        FleetEnv(FLEET_ID=fid, knobs=replace(Ec2Config().for_cloud("aws", "us-east-1"), bucket="b"), CODE_SHA="abc")
    )
    assert "@FLEET_ENV@" not in user_data and len(user_data.encode()) <= USER_DATA_LIMIT
    ids = launch_workers(
        ec2,
        count=2,
        ami=_image(ec2),
        config=Ec2Config(instance_profile=profile),
        fleet_id=fid,
        launched_by="alice",
        user_data=user_data,
        group=group,
    )
    assert len(ids) == 2
    live = fleet.live_instances(ec2, fid)
    assert sorted(i["InstanceId"] for i in live) == sorted(ids)
    tags = {t["Key"]: t["Value"] for t in live[0]["Tags"]}
    assert tags["FleetId"] == fid and tags["LaunchedBy"] == "alice" and tags["ManagedBy"] == "ct-fleet"
    got = ec2.describe_instance_attribute(InstanceId=ids[0], Attribute="userData")["UserData"]["Value"]
    assert base64.b64decode(got).decode() == user_data
    # What moto's CreateFleet does not copy onto the instances, the template says.
    (template,) = ec2.describe_launch_templates(LaunchTemplateNames=[launching.template_name(fid)])["LaunchTemplates"]
    data = ec2.describe_launch_template_versions(LaunchTemplateId=template["LaunchTemplateId"])[
        "LaunchTemplateVersions"
    ][0]["LaunchTemplateData"]
    assert data["InstanceInitiatedShutdownBehavior"] == "terminate" and data["IamInstanceProfile"]["Name"] == profile
    assert data["SecurityGroupIds"] == [group] and data["MetadataOptions"]["HttpTokens"] == "required"
    fleet.terminate(ec2, ids)
    assert fleet.live_instances(ec2, fid) == []
    assert launching.delete_fleet_requests(ec2, fid) == 1 and launching.delete_launch_templates(ec2, fid) == 1
    assert ec2.describe_launch_templates(Filters=[{"Name": "tag:FleetId", "Values": [fid]}])["LaunchTemplates"] == []


def test_ami_lookup_order(aws_client):
    ec2, ssm = aws_client("ec2"), aws_client("ssm")
    fid = _fid()
    baked_param, stock_param = f"/linuxbench/t-{fid}/worker-ami-id", f"/stock/{fid}/ami-id"
    cfg = Ec2Config(ami_param=baked_param, stock_ami_param=stock_param)
    with pytest.raises(BadInput, match="no worker AMI.*bin/build-ami"):
        fleet.resolve_ami(ec2, ssm, cfg)
    ssm.put_parameter(Name=stock_param, Value="ami-stock", Type="String")
    assert fleet.resolve_ami(ec2, ssm, cfg) == ("ami-stock", False)
    ssm.put_parameter(Name=baked_param, Value="ami-baked", Type="String")
    assert fleet.resolve_ami(ec2, ssm, cfg) == ("ami-baked", True)
    assert fleet.resolve_ami(ec2, ssm, Ec2Config(ami="ami-explicit")) == ("ami-explicit", True)
    with pytest.raises(BadInput, match="AMI parameter /nope not found"):
        fleet.resolve_ami(ec2, ssm, Ec2Config(ami="/nope"))


def test_per_instance_secrets_are_tagged_and_deleted(aws_client):
    ssm = aws_client("ssm")
    fid = _fid()
    given = {"GH_TOKEN": "t0k", "ANTHROPIC_API_KEY": 'sk-\u00e9\n"q"'}
    secrets.put_for_instances(ssm, fid, ["i-1", "i-2"], given, account="123", region="us-east-1")
    name = secret_bundle(fid, "i-1")
    param = ssm.get_parameter(Name=name, WithDecryption=True)["Parameter"]
    assert param["Type"] == "SecureString" and json.loads(param["Value"]) == {"of": 1, "secrets": given}
    tags = {
        t["Key"]: t["Value"] for t in ssm.list_tags_for_resource(ResourceType="Parameter", ResourceId=name)["TagList"]
    }
    assert tags["InstanceArn"] == "arn:aws:ec2:us-east-1:123:instance/i-1"
    # One parameter per instance, whatever the number of secrets.
    assert secrets.delete_fleet_secrets(ssm, fid) == 2
    assert ssm.get_parameters_by_path(Path=secrets_prefix(fid), Recursive=True)["Parameters"] == []


def test_secrets_over_4_kb_overflow_into_more_parameters_ssm_takes(aws_client):
    ssm = aws_client("ssm")
    fid = _fid()
    given = {f"KEY_{i}": chr(0x4E00 + i) * 700 for i in range(5)}  # 2,100 UTF-8 bytes each
    secrets.put_for_instances(ssm, fid, ["i-1"], given, account="123", region="us-east-1")
    raw = [
        ssm.get_parameter(Name=secret_bundle(fid, "i-1", i), WithDecryption=True)["Parameter"]["Value"]
        for i in range(5)
    ]
    assert all(len(value.encode()) <= secrets.VALUE_LIMIT for value in raw)
    values = [json.loads(value) for value in raw]
    assert {v["of"] for v in values} == {5}
    assert {k: v for b in values for k, v in b["secrets"].items()} == given


def test_a_secret_no_parameter_holds_is_refused_by_name():
    with pytest.raises(BadInput, match="secret BIG_KEY is 5000 bytes"):
        secrets.bundles({"GH_TOKEN": "t", "BIG_KEY": "x" * 5000})
    with pytest.raises(BadInput, match="need 12 SSM parameters"):
        secrets.bundles({f"K{i:02}": "x" * 3000 for i in range(12)})
    assert secrets.bundles({}) == []


def test_spot_launch_asks_for_spot_instances(aws_client):
    ec2 = aws_client("ec2")
    profile = f"p-{_fid()}"
    _profile(aws_client, profile)
    group = fleet.ensure_security_group(ec2, f"sg-{_fid()}")
    fid = _fid()
    (instance_id,) = launch_workers(
        ec2,
        count=1,
        ami=_image(ec2),
        config=Ec2Config(instance_profile=profile, spot=True),
        fleet_id=fid,
        launched_by="alice",
        user_data="#!/bin/bash\n",
        group=group,
    )
    (inst,) = fleet.live_instances(ec2, fid)
    assert inst.get("InstanceLifecycle") == "spot"
    fleet.terminate(ec2, [instance_id])


def test_the_estimate_prices_spot_from_the_spot_history_before_anything_exists(aws_env):
    from ct_fleet.cloud import AwsCloud
    from ct_fleet.cloud.prices import hourly_price

    def price(**knobs: object):
        cloud = AwsCloud(region="us-east-1")
        cloud.check_credentials({}, aws_env)  # planning: credentials checked, cloud not started
        cfg = Ec2Config(instance_types="c6i.4xlarge,m6i.4xlarge", **knobs).for_cloud("aws", "us-east-1")  # type: ignore[arg-type]
        return cloud.hourly_price(cfg)

    spot = price(spot=True)
    assert re.fullmatch(r"c6i\.4xlarge spot now, highest of [1-9]\d* AZs", spot.source), spot.source
    assert 0 < spot.usd < hourly_price("c6i.4xlarge")  # moto's spot history, not the table
    assert price().usd == hourly_price("c6i.4xlarge") and "on-demand" in price().source
    assert price(spot=True, hourly_price=0.5).usd == 0.5
    # With spot history unreadable (no endpoint answers), the on-demand table is the upper bound.
    dead = {**aws_env, "AWS_ENDPOINT_URL": "http://127.0.0.1:9"}
    clients = session.settings()
    session.configure(replace(clients, max_attempts=1))
    try:
        cloud = AwsCloud(region="us-east-1")
        cloud.check_credentials({}, dead)
        unread = cloud.hourly_price(Ec2Config(spot=True).for_cloud("aws", "us-east-1"))
    finally:
        session.configure(clients)
    assert "spot price not readable" in unread.source and unread.usd == hourly_price(unread.source.split()[0])


def test_controller_adds_workers_while_cpu_bound_up_to_max(aws_client, aws_env, tmp_path: Path):
    """Past the first launch (24), workers are added one at a time while heartbeats say the
    fleet is CPU-bound and work is waiting, never beyond max_workers."""
    import time

    from ct_fleet.cloud import AwsCloud
    from ct_fleet.controller.fleet import FleetRun
    from ct_fleet.controller.planning import FleetSpec, FleetTask, Job, survey

    ec2, ssm = aws_client("ec2"), aws_client("ssm")
    fid, profile = _fid(), f"p-{_fid()}"
    _profile(aws_client, profile)
    param = f"/linuxbench/t-{fid}/worker-ami-id"
    ssm.put_parameter(Name=param, Value=_image(ec2), Type="String")
    cfg = Ec2Config(
        max_workers=25, concurrency_per_worker=10, ami_param=param, instance_profile=profile, security_group=f"sg-{fid}"
    ).for_cloud("aws", "us-east-1")
    task = FleetTask("toyarena", "x", "code", {"policy": "honest"}, [f"web:fix_login#{i}" for i in range(300)])
    jobs = [Job(f"j{i}", task.key, f"web:fix_login#{i}", 1) for i in range(300)]
    spec = FleetSpec(fid, [task], jobs, "mockllm/model", 1, "sha", cfg, policy="honest")
    cloud = AwsCloud(region="us-east-1", endpoint_url=aws_env["AWS_ENDPOINT_URL"])
    store.ensure_bucket(
        aws_client("s3"), cfg.bucket, create=True
    )  # the first launch says the fleet has no budget there
    ctl = FleetRun(
        cloud,
        spec,
        tmp_path,
        launched_by="alice",
        account="123",
        warn=lambda text: None,
        capacity=survey(cloud, cfg, fid, print),
    )
    pool = ctl.pool
    pool.user_data = "#!/bin/bash\n"
    q = queues.ensure_queues(ctl.sqs, fid, visibility_timeout=30, max_receive_count=3)
    queues.send_batch(ctl.sqs, q.work, ["job"] * 20)
    waiting = queues.depths(ctl.sqs, q, roles=("work", "dlq"))["work"]
    first = pool.launch_first(len(jobs))
    assert len(first) == 24

    def live() -> list[str]:
        return [i["InstanceId"] for i in fleet.live_instances(ec2, fid)]

    def manage() -> str | None:
        return pool.manage(live(), remaining=ctl.state.remaining, waiting=waiting)

    pool.worker_load = {i: (0.3, time.monotonic()) for i in first}  # not CPU-bound: nothing added
    assert manage() is None and len(live()) == 24
    pool.worker_load = {i: (0.95, time.monotonic()) for i in first}
    assert manage() is None and len(live()) == 25
    pool.last_scale_up = 0.0  # past the cool-down
    assert manage() is None and len(live()) == 25  # max_workers reached
    fleet.terminate(ec2, live())


def test_workers_are_sent_to_ssm_for_registry_auth_only_when_it_exists(aws_client):
    """The controller looks once; a fleet without registry credentials has its workers skip
    the SSM read at boot (an AWS CLI start each, and SSM's read rate at a large launch)."""
    from ct_fleet.controller.fleet.worker_env import fleet_env
    from ct_fleet.services.secrets import parameter_exists

    ssm = aws_client("ssm")
    name = f"/linuxbench/docker-org-name-{uuid.uuid4().hex[:8]}"
    assert parameter_exists(ssm, name) is False
    ssm.put_parameter(Name=name, Value="org", Type="String")
    assert parameter_exists(ssm, name) is True
    ssm.delete_parameter(Name=name)

    class Spec:  # the fields fleet_env reads
        fleet_id, code_sha, settings, setting_requirements, command = "f1", "sha", ("toyarena",), (), None
        config = Ec2Config(bucket="b")

    class Region:
        region = "us-east-1"

    asked = fleet_env(Spec(), Region(), {}, [], environ={})  # type: ignore[arg-type]
    assert asked.DOCKER_ORG_NAME_SSM_PARAM == "/linuxbench/docker-org-name"
    skipped = fleet_env(Spec(), Region(), {}, [], environ={}, registry_auth=False)  # type: ignore[arg-type]
    assert skipped.DOCKER_ORG_NAME_SSM_PARAM == skipped.DOCKER_ORG_PAT_SSM_PARAM == ""

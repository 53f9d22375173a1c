"""`bin/ct-fleet eval --ec2` against a moto server: the EC2 code path, with the local instance
runner executing every launched instance's user-data. Then check what moto holds."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import threading
import time
import uuid
from pathlib import Path

import psutil
import pytest
from inspect_ai.log import read_eval_log

from testkit.fleet import account_aws, ec2_account, launch_workers, run_cli, run_ec2

REPO = Path(__file__).resolve().parents[2]
CANARY = "canary-" + uuid.uuid4().hex


@pytest.fixture(scope="module")
def account(moto_server, tmp_path_factory: pytest.TempPathFactory):
    """What an admin creates once (bucket, worker role and profile, the baked AMI id); the
    role may already be there, made by another module on the same server."""
    runs = tmp_path_factory.mktemp("ec2runs")
    return ec2_account(moto_server.endpoint_url, runs, f"ANTHROPIC_API_KEY={CANARY}\nGH_TOKEN={CANARY}-gh\n")


def _watch_command_lines(stop: threading.Event, seen: list[str], delivered: dict[str, str], runs: Path) -> None:
    """Collect every process command line that shows the canary secret while the fleet runs,
    and the secrets files of the workers while they exist (they go with their instance)."""
    while not stop.is_set():
        for proc in psutil.process_iter(["cmdline"]):
            line = " ".join(proc.info["cmdline"] or [])
            if CANARY in line:
                seen.append(line)
        for path in runs.glob("*/instances/*/etc/linuxbench/secrets.env"):
            try:
                delivered[str(path)] = oct(path.stat().st_mode)[-3:] + ":" + path.read_text()
            except OSError:
                pass
        time.sleep(0.1)


# Every call of the module's run goes through a proxy that throttles and fails a share of
# SQS, S3 and SSM requests, some of them after the call took effect (so retries create real
# duplicates): what the other tests check of it holds under faults too.
FAULTS = [
    "sqs:*:throttle:before:0.08",
    "sqs:*:5xx:after:0.04",
    "s3:*:throttle:before:0.08",
    "s3:*:5xx:after:0.04",
    "ssm:*:throttle:before:0.1",
]


@pytest.fixture(scope="module")
def ec2_run(account, tmp_path_factory: pytest.TempPathFactory):
    from testkit.faultproxy import spawn_proxy

    stop, seen, delivered = threading.Event(), [], {}
    watcher = threading.Thread(target=_watch_command_lines, args=(stop, seen, delivered, account["runs"]), daemon=True)
    watcher.start()
    stats = tmp_path_factory.mktemp("proxy") / "stats.json"
    with spawn_proxy(account["kw"]["endpoint_url"], rules=FAULTS, stats_path=stats, seed=7) as proxy:
        proc = run_ec2(
            account,
            *("--ec2-arg", "visibility_timeout=10", "--ec2-arg", "heartbeat_interval=5"),
            *("--ec2-arg", "retry_backoff=1"),
            extra_env={"AWS_RETRY_MODE": "standard", "AWS_MAX_ATTEMPTS": "10"},
            endpoint=proxy.endpoint_url,
        )
    stop.set()
    watcher.join()
    account["cmdlines_with_canary"] = seen
    account["secrets_delivered"] = delivered
    account["injected"] = proxy.injected
    fleet_id = next(p.name for p in account["runs"].iterdir() if p.is_dir())
    return proc, fleet_id


def client(account, service: str):
    return account["client"](service)


@pytest.mark.e2e
def test_ec2_smoke_runs_end_to_end(ec2_run, account):
    proc, fleet_id = ec2_run
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "EC2 console: https://us-east-1.console.aws.amazon.com/ec2/" in proc.stdout
    merged = list((account["runs"] / fleet_id / "merged").glob("*.eval"))
    assert len(merged) == 1
    keys = [o["Key"] for o in client(account, "s3").list_objects_v2(Bucket=account["bucket"])["Contents"]]
    assert sum(k.startswith(f"{fleet_id}/") and k.endswith(".eval") for k in keys) == 4
    assert f"{fleet_id}/manifest.json" in keys
    assert any(k.startswith(f"{fleet_id}/logs/") and k.endswith("-bootstrap.log") for k in keys)


@pytest.mark.e2e
def test_instances_are_tagged_profiled_terminated_and_firewalled(ec2_run, account):
    proc, fleet_id = ec2_run
    assert proc.returncode == 0, proc.stderr
    ec2 = client(account, "ec2")
    reservations = ec2.describe_instances(Filters=[{"Name": "tag:FleetId", "Values": [fleet_id]}])["Reservations"]
    instances = [i for r in reservations for i in r["Instances"]]
    assert instances and all(i["State"]["Name"] == "terminated" for i in instances)
    for inst in instances:
        tags = {t["Key"]: t["Value"] for t in inst["Tags"]}
        assert tags["ManagedBy"] == "ct-fleet" and tags["LaunchedBy"] and tags["FleetId"] == fleet_id
        # The profile, shutdown behaviour and security group come from the fleet's launch
        # template, which moto's CreateFleet does not copy onto instances:
        # test_aws_integration checks the template the code makes.
        user_data = ec2.describe_instance_attribute(InstanceId=inst["InstanceId"], Attribute="userData")["UserData"][
            "Value"
        ]
        assert CANARY not in base64.b64decode(user_data).decode()
    templates = ec2.describe_launch_templates(Filters=[{"Name": "tag:FleetId", "Values": [fleet_id]}])
    assert templates["LaunchTemplates"] == [], "teardown deletes the fleet's launch template"
    (sg,) = ec2.describe_security_groups(GroupNames=["linuxbench-fleet-worker-sg"])["SecurityGroups"]
    assert sg["IpPermissions"] == []


@pytest.mark.e2e
def test_no_secret_left_in_ssm_s3_or_logs(ec2_run, account):
    proc, fleet_id = ec2_run
    assert proc.returncode == 0, proc.stderr
    ssm = client(account, "ssm")
    left = ssm.get_parameters_by_path(Path="/linuxbench/fleet-secrets", Recursive=True)["Parameters"]
    assert [p["Name"] for p in left if fleet_id in p["Name"]] == []
    s3 = client(account, "s3")
    for obj in s3.list_objects_v2(Bucket=account["bucket"])["Contents"]:
        body = s3.get_object(Bucket=account["bucket"], Key=obj["Key"])["Body"].read()
        assert CANARY.encode() not in body, obj["Key"]
    for path in (account["runs"] / fleet_id).rglob("*"):
        if path.is_file():  # secrets.env included: it went with its instance
            assert CANARY.encode() not in path.read_bytes(), path
    assert CANARY not in proc.stdout + proc.stderr
    assert account["cmdlines_with_canary"] == []  # never on a command line, in any process
    # The workers did receive the secret while they ran, through SSM only, in a root-only file.
    delivered = account["secrets_delivered"]
    assert delivered and all(text.startswith("600:") and CANARY in text for text in delivered.values())


@pytest.mark.e2e
def test_estimate_launches_nothing(account):
    proc = run_ec2(account, "--epochs", "2", "--ec2-arg", "estimate=true")
    assert proc.returncode == 0, proc.stderr
    assert "cost estimate" in proc.stdout and "mean of" in proc.stdout  # durations of the earlier fleet
    assert "on-demand, prices.json" in proc.stdout
    spot = run_ec2(account, "--epochs", "2", "--ec2-arg", "estimate=true", "--ec2-arg", "spot=true")
    assert spot.returncode == 0, spot.stderr
    assert "spot now, highest of" in spot.stdout, spot.stdout  # DescribeSpotPriceHistory, before launch


BAD = [
    (["--ec2-arg", "ami_param=/linuxbench/none", "--ec2-arg", "new_fleet=true"], "no worker AMI", {}),
    (["--ec2-arg", "bucket=missing-bucket-xyz"], "does not exist", {}),
    ([], "AWS_PROFILE=p and AWS_ACCESS_KEY_ID are both set", {"AWS_PROFILE": "p"}),
    (["--policy", "mypkg.x:pol"], "--extra-src", {}),
]


@pytest.mark.parametrize("args,message,extra_env", BAD)
def test_bad_ec2_input_exits_2_before_launching(account, args, message, extra_env):
    ec2 = client(account, "ec2")
    before = len([i for r in ec2.describe_instances()["Reservations"] for i in r["Instances"]])
    proc = run_ec2(account, *args, extra_env=extra_env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in proc.stderr
    after = len([i for r in ec2.describe_instances()["Reservations"] for i in r["Instances"]])
    assert after == before


def ct(account, *args: str, runs: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("AWS_PROFILE",)}
    env.update(
        account_aws(account),
        CT_FLEET_RUNS=str(runs or account["runs"]),
        CT_FLEET_DOTENV=str(account["runs"] / ".env"),
        COLUMNS="200",
    )
    return run_cli(args, env=env, timeout=120)


@pytest.mark.e2e
def test_status_and_logs_from_another_machine(ec2_run, account, tmp_path: Path):
    proc, fleet_id = ec2_run
    assert proc.returncode == 0, proc.stderr
    status = ct(account, "status", fleet_id, "--bucket", account["bucket"])
    assert status.returncode == 0, status.stderr
    row = next(line for line in status.stdout.splitlines() if "honest" in line)
    cells = [c.strip() for c in row.strip("│ ").split("│")]
    assert cells[:6] == ["toyarena", "mockllm/model", "honest", "4", "4", "0"]  # task x model, jobs, results, left
    as_json = json.loads(ct(account, "status", fleet_id, "--bucket", account["bucket"], "--json").stdout)
    assert (as_json["source"], as_json["state"], as_json["results"], as_json["left"]) == ("s3", "complete", 4, 0)
    assert as_json["queues"] is None  # a finished fleet deletes its queues
    # Another machine: nothing of the fleet on its disk; view fetches and merges it from S3.
    elsewhere = ct(account, "view", fleet_id, "--bucket", account["bucket"], "--no-serve", runs=tmp_path / "elsewhere")
    assert elsewhere.returncode == 0, elsewhere.stderr
    (merged,) = elsewhere.stdout.split()
    assert Path(merged).parent == tmp_path / "elsewhere" / fleet_id / "merged"
    assert len(read_eval_log(merged).samples or []) == 4
    logs = ct(account, "logs", fleet_id, "--bucket", account["bucket"])
    assert logs.returncode == 0 and "step run-worker: ok" in logs.stdout and "step fetch-code: ok" in logs.stdout
    got = ct(account, "logs", fleet_id, "--bucket", account["bucket"], "-o", str(tmp_path / "logs"))
    assert got.returncode == 0 and list((tmp_path / "logs").glob("i-*-bootstrap.log"))
    missing = ct(account, "status", "nosuchfleet0", "--bucket", account["bucket"])
    assert missing.returncode == 2 and "no fleet nosuchfleet0" in missing.stderr

    # A controller on a third machine drives the fleet again (its lease is fresh): status
    # says running, and a view merges the results so far as a run that goes on.
    from ct_fleet.controller.fleet.lease import S3Lease

    lease = S3Lease(client(account, "s3"), account["bucket"], fleet_id)
    lease.acquire()
    try:
        state = json.loads(ct(account, "status", fleet_id, "--bucket", account["bucket"], "--json").stdout)["state"]
        live = ct(account, "view", fleet_id, "--bucket", account["bucket"], "--no-serve", runs=tmp_path / "third")
    finally:
        lease.release()
    assert state == "running"
    assert live.returncode == 0, live.stderr
    assert read_eval_log(live.stdout.split()[0], header_only=True).status == "started"
    assert read_eval_log(merged, header_only=True).status == "success"  # the view with no controller


@pytest.mark.e2e
def test_cloud_status_groups_own_and_all_fleets_and_ssh(account):
    from ct_fleet.protocol import Ec2Config
    from ct_fleet.services import instances as fleet_mod
    from ct_fleet.services import queues as queues_mod

    ec2, sqs = client(account, "ec2"), client(account, "sqs")
    me = client(account, "sts").get_caller_identity()["Arn"].rsplit("/", 1)[-1]
    image = ec2.register_image(Name=f"s-{uuid.uuid4().hex[:6]}", RootDeviceName="/dev/sda1")["ImageId"]
    group = fleet_mod.ensure_security_group(ec2, "linuxbench-fleet-worker-sg")
    mine, theirs = "mine" + uuid.uuid4().hex[:8], "theirs" + uuid.uuid4().hex[:6]
    ids = {}
    for fid, owner in ((mine, me), (theirs, "someone-else")):
        ids[fid] = launch_workers(
            ec2,
            count=1,
            ami=image,
            config=Ec2Config(),
            fleet_id=fid,
            launched_by=owner,
            user_data="#!/bin/bash\n",
            group=group,
        )
        queues_mod.ensure_queues(sqs, fid, visibility_timeout=30, max_receive_count=3)
    own = ct(account, "cloud", "status")
    assert own.returncode == 0, own.stderr
    assert mine in own.stdout and theirs not in own.stdout
    everyone = ct(account, "cloud", "status", "--all-users")
    assert mine in everyone.stdout and theirs in everyone.stdout and "someone-else" in everyone.stdout
    ssh = ct(account, "ssh", ids[mine][0], "--dry-run")
    assert ssh.returncode == 0, ssh.stderr
    assert f"ec2-instance-connect open-tunnel --instance-id {ids[mine][0]}" in ssh.stdout
    for fid in (mine, theirs):
        fleet_mod.terminate(ec2, ids[fid])
        queues_mod.delete_queues(sqs, queues_mod.find_queues(sqs, fid))


@pytest.mark.faults
def test_throttling_and_5xx_lose_no_job_and_no_result(ec2_run, account):
    """The module's run met its faults (FAULTS) and still has every result once."""
    proc, fleet_id = ec2_run
    assert proc.returncode == 0, proc.stdout + proc.stderr
    injected = account["injected"]
    assert sum(injected.values()) >= 10, injected
    assert {action.split(":")[0] for action, _, _ in injected} >= {"sqs", "s3"}
    assert any(when == "after" for _, _, when in injected)  # real duplicates were made
    (merged,) = (account["runs"] / fleet_id / "merged").glob("*.eval")
    pairs = [(s.id, s.epoch) for s in read_eval_log(str(merged)).samples or []]
    assert len(pairs) == 4 and len(set(pairs)) == 4

"""Looking at fleets: `fleets`, `status`, `report`, `cloud status`, `logs`, `ssh`."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import click
from pydantic import TypeAdapter
from rich.live import Live

from ..cloud import Cloud, connect_aws
from ..controller.fleet import sweep_orphan_secrets
from ..controller.planning import dotenv_path, launched_by, read_dotenv
from ..controller.reporting import (
    FleetStatus,
    checked_fleet_id,
    cloud_status,
    is_local_fleet,
    local_fleets,
    local_status,
    log_keys,
    model_prices,
    s3_status,
    write_report,
)
from ..errors import BadInput
from ..paths import runs_dir
from ..protocol import Ec2Config
from ..protocol.keys import INSTANCE_ID
from .console import console, err
from .display import cloud_status_table, fleets_table, run_status_view


def aws_cloud(region: str | None) -> Cloud:
    """Commands that look at the real fleet: credentials as for --ec2."""
    return connect_aws(
        region or os.environ.get("AWS_REGION") or "us-east-1", os.environ, read_dotenv(dotenv_path(os.environ))
    )


def _instance_id(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Checked before anything is asked of AWS: the id also goes into ssh's ProxyCommand."""
    if value is not None and not INSTANCE_ID.fullmatch(value):
        raise BadInput(
            f"{value!r} is not an EC2 instance id: give one like i-0123456789abcdef0 (ct-fleet cloud status)"
        )
    return value


region_option = click.option("--region", help="AWS region (default: AWS_REGION, else us-east-1)")
bucket_option = click.option("--bucket", default=Ec2Config().bucket, show_default=True, help="results bucket")


@click.command(name="status")
@click.option("--all-users", is_flag=True, help="everyone's fleets, not just yours")
@click.option("--clean", is_flag=True, help="first delete worker secrets whose instances are gone")
@region_option
def cloud_status_command(all_users: bool, clean: bool, region: str | None) -> None:
    """Show running instances and fleet queues, grouped by fleet, with cost so far.

    Queue columns: work waiting / in flight, done waiting, dead letters. With --clean,
    secrets left in SSM by a controller that died before its teardown are deleted first
    (those of instances that still run are kept).
    """
    cloud = aws_cloud(region)
    if clean:
        swept = sweep_orphan_secrets(cloud.client("ssm"), cloud.client("ec2"))
        for fleet_id, count in sorted(swept.items()):
            console.print(f"deleted {count} secret(s) of fleet {fleet_id} (its instances are gone)", highlight=False)
        if not swept:
            console.print("no secrets left behind", highlight=False)
    me = None if all_users else launched_by(cloud.client("sts"), cloud.context.profile if cloud.context else None)
    rows = cloud_status(cloud.client("ec2"), cloud.client("sqs"), launched_by=me)
    console.print(cloud_status_table(rows, datetime.now(UTC)))
    if not rows:
        console.print(f"no fleets{'' if all_users else ' of ' + str(me)} running", highlight=False)


@click.command(name="status")
@click.argument("fleet_id", callback=lambda ctx, param, value: checked_fleet_id(value))
@click.option("--json", "as_json", is_flag=True, help="print the status as JSON (schema in docs/json.md)")
@click.option(
    "--watch",
    type=click.FloatRange(min=1),
    metavar="SECONDS",
    help="redraw every SECONDS until the fleet is no longer running (for people; scripts poll --json)",
)
@region_option
@bucket_option
def status_command(fleet_id: str, as_json: bool, watch: float | None, region: str | None, bucket: str) -> None:
    """Show how far one fleet is: jobs, results, queues and workers, per task x model.

    Each task x model is shown with its model (and, for a setting run, its policy) and,
    once a merged log of it is on this machine, its metrics: the results so far while the
    fleet runs.

    A fleet of the embedded cloud is read from runs/FLEET_ID/ (during its run and after
    it). An EC2 fleet is read from S3 and SQS, so this works from any machine with read
    access to the account, e.g. `ct-fleet status 3f2a9c0d1e4b --json | jq .left`.
    `ct-fleet fleets` lists the fleet ids of this machine.
    """
    if watch and as_json:
        raise BadInput("--watch redraws a table for people: with --json, poll `ct-fleet status FLEET --json`")
    run_dir = runs_dir(os.environ) / fleet_id
    if is_local_fleet(run_dir):

        def fetch() -> FleetStatus:
            return local_status(run_dir)
    else:
        cloud = aws_cloud(region)
        s3, sqs, ec2 = cloud.client("s3"), cloud.client("sqs"), cloud.client("ec2")

        def fetch() -> FleetStatus:
            return s3_status(s3, sqs, ec2, bucket, fleet_id, run_dir if run_dir.is_dir() else None)

    if as_json:
        click.echo(fetch().model_dump_json(indent=2))
    elif watch:
        _watch(fetch, watch)
    else:
        console.print(run_status_view(fetch()))


def _watch(fetch: Callable[[], FleetStatus], every: float) -> None:
    with Live(console=console, auto_refresh=False) as live:
        while True:
            status = fetch()
            live.update(run_status_view(status), refresh=True)
            if status.state != "running":
                return
            time.sleep(every)


@click.command(name="fleets")
@click.option("--json", "as_json", is_flag=True, help="print a JSON array, one `status --json` object per fleet")
def fleets_command(as_json: bool) -> None:
    """List the fleets this machine ran, the newest first: one row per runs/FLEET_ID/.

    Each row: the fleet id, when its last run enqueued its jobs, its cloud (embedded or
    ec2), its state (running, complete, incomplete), jobs with a result of all its jobs,
    and its tasks x models. Read from the run directories alone, so it needs no AWS: an
    EC2 fleet shows the results fetched here (`ct-fleet status FLEET` asks S3 and SQS).

    \b
    ct-fleet fleets                  # which fleets, how far
    ct-fleet status FLEET_ID         # one of them: each task x model, with its metrics
    ct-fleet view FLEET_ID           # its merged logs in inspect view
    ct-fleet fleets --json | jq -r '.[] | select(.state == "incomplete") | .fleet_id'
    """
    runs = runs_dir(os.environ)
    fleets = local_fleets(
        runs,
        on_skip=lambda run_dir, why: err.print(f"left out {run_dir}: {why}", highlight=False, markup=False),
    )
    if as_json:
        click.echo(TypeAdapter(list[FleetStatus]).dump_json(fleets, indent=2).decode())
        return
    if not fleets:
        console.print(f"no fleets in {runs}", highlight=False, soft_wrap=True)
        return
    console.print(fleets_table(fleets))


@click.command(name="report")
@click.argument("fleet_id", callback=lambda ctx, param, value: checked_fleet_id(value))
def report_command(fleet_id: str) -> None:
    """Write the fleet's run report: runs/FLEET_ID/report.html, its data in report.json.

    One self-contained page that opens offline: each task x model's results (its merged
    log's metrics), workers x time (a bar per job, by outcome), throughput, cost, failures
    with a repro command, the slowest jobs, phase times. A run writes it at its end; this writes it again from what runs/FLEET_ID/ holds
    (on the machine the fleet ran from).
    """
    page = write_report(runs_dir(os.environ) / fleet_id, model_prices(os.environ))
    console.print(f"report: {page} (data: {page.with_suffix('.json')})", highlight=False, soft_wrap=True)


@click.command(name="logs")
@click.argument("fleet_id")
@click.argument("instance_id", required=False, callback=_instance_id)
@click.option(
    "-o",
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    help="download into this directory instead of printing",
)
@region_option
@bucket_option
def logs_command(fleet_id: str, instance_id: str | None, out: Path | None, region: str | None, bucket: str) -> None:
    """Print (or download) the bootstrap logs of a fleet's workers, each step with its timing."""
    cloud = aws_cloud(region)
    s3 = cloud.client("s3")
    keys = log_keys(s3, bucket, fleet_id, instance_id)
    if not keys:
        raise BadInput(f"no bootstrap logs under s3://{bucket}/{fleet_id}/logs/{instance_id or ''}")
    for key in keys:
        if out:
            out.mkdir(parents=True, exist_ok=True)
            s3.download_file(bucket, key, str(out / key.rsplit("/", 1)[-1]))
            console.print(f"downloaded {key}", highlight=False)
        else:
            console.rule(key)
            console.print(
                s3.get_object(Bucket=bucket, Key=key)["Body"].read().decode(errors="replace"),
                highlight=False,
                markup=False,
            )


@click.command(name="ssh")
@click.argument("instance_id", callback=_instance_id)
@click.option("--user", default="ubuntu", show_default=True, help="OS user on the worker")
@click.option("--dry-run", is_flag=True, help="push the key and print the ssh command instead of running it")
@region_option
def ssh_command(instance_id: str, user: str, dry_run: bool, region: str | None) -> None:
    """Open a shell on a worker through EC2 Instance Connect (emergency debugging).

    Pushes a fresh one-time key (valid 60 s) and connects through an EC2 Instance Connect
    tunnel, since workers accept no inbound traffic. Then rerun a step by hand, e.g.
    `sudo LB_NO_SHUTDOWN=1 /opt/linuxbench/worker/run-worker.sh` (docs/debugging.md).
    """
    import shlex
    import subprocess
    import tempfile

    cloud = aws_cloud(region)
    reservations = cloud.client("ec2").describe_instances(InstanceIds=[instance_id])["Reservations"]
    inst = reservations[0]["Instances"][0]
    key_dir = Path(tempfile.mkdtemp(prefix="ct-fleet-ssh-"))
    key = key_dir / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    cloud.client("ec2-instance-connect").send_ssh_public_key(
        InstanceId=instance_id,
        InstanceOSUser=user,
        SSHPublicKey=key.with_suffix(".pub").read_text(),
        AvailabilityZone=inst["Placement"]["AvailabilityZone"],
    )
    proxy = f"aws ec2-instance-connect open-tunnel --instance-id {instance_id} --region {cloud.region}"
    cmd = [
        "ssh",
        "-i",
        str(key),
        "-o",
        f"ProxyCommand={proxy}",
        "-o",
        "StrictHostKeyChecking=accept-new",
        f"{user}@{instance_id}",
    ]
    if dry_run:
        console.print(shlex.join(cmd), highlight=False, soft_wrap=True)
        return
    os.execvp("ssh", cmd)

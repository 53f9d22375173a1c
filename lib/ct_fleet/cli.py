"""ct-fleet's command line. One function per command; `ct-fleet COMMAND --help` teaches each."""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import datetime, timezone
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click
import yaml
from rich.console import Console

from . import code, config, cost, credentials, fleet, observe, plan, preflight, store
from . import secrets as fleet_secrets
from .cloud import Cloud, connect_aws, prepare_embedded_account, start_embedded
from .config import START_CONCURRENCY
from .controller import Controller, FleetInterrupted, FleetSpec, RunResult, first_launch_count
from .display import (
    LiveProgress,
    cloud_status_table,
    dead_table,
    estimate_table,
    run_status_table,
    summary_table,
)
from .errors import BadInput
from .settings import REPO_ROOT, SETTINGS_DIR, Setting, load_setting

console = Console(stderr=False)
err = Console(stderr=True)
RUNS_DIR = Path(os.environ.get("CT_FLEET_RUNS", REPO_ROOT / "runs"))
DOTENV = Path(os.environ.get("CT_FLEET_DOTENV", REPO_ROOT / ".env"))


def _knob_help() -> str:
    return "\b\nFleet knobs for --ec2-arg key=value (repeatable):\n" + "\n".join(
        f"  {line}" for line in config.help_table().splitlines()
    )


class CtFleetGroup(click.Group):
    """Turns BadInput anywhere below into one line on stderr and exit status 2."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except BadInput as exc:
            err.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
            sys.exit(BadInput.exit_code)


@click.group(cls=CtFleetGroup)
@click.version_option(package_name="ct-fleet")
def cli() -> None:
    """Run Inspect AI evaluations on a fleet of workers.

    Without --ec2 the fleet runs on this machine against an embedded AWS (a moto server
    on loopback) with local worker processes: no account needed. With --ec2 it runs on EC2.
    """


def _tasks(setting_name: str, task_file: str | None, envs: Sequence[str], mains: Sequence[str], sides: Sequence[str]) -> tuple[Setting, list[plan.TaskSpec]]:
    setting = load_setting(setting_name)
    catalog = setting.catalog()
    if task_file:
        if envs or mains or sides:
            raise BadInput("use either --task-file or -e/-t/-s, not both")
        tasks = plan.load_task_file(plan.resolve_task_file(task_file))
    else:
        tasks = plan.select_tasks(catalog, envs, mains, sides)
    plan.validate_tasks(tasks, catalog)
    return setting, plan.dedupe(tasks)


def _worker_settings(spec: FleetSpec, cloud: Cloud, secrets: dict[str, str], extra_keys: list[str]) -> dict[str, str]:
    """The fleet's settings as they appear in user-data: names and knobs, never a secret value."""
    cfg = spec.config
    docker_name, docker_pat = preflight.docker_auth_params(dict(os.environ))
    values = {
        "FLEET_ID": spec.fleet_id,
        "BUCKET": cfg.bucket,
        "CODE_SHA": spec.code_sha,
        "AWS_REGION": cloud.region,
        "CONCURRENCY": str(cfg.concurrency_per_worker),
        "IDLE_TIMEOUT": str(cfg.idle_timeout),
        "VISIBILITY_TIMEOUT": str(cfg.visibility_timeout),
        "HEARTBEAT_INTERVAL": str(cfg.heartbeat_interval),
        "RETRY_BACKOFF": str(cfg.retry_backoff),
        "SETTINGS": spec.setting,
        "SECRET_NAMES": " ".join(sorted(secrets)),
        "SECRET_PREFIX": fleet_secrets.prefix(spec.fleet_id),
        "SPOT": "true" if cfg.spot else "false",
        "DOCKER_ORG_NAME_SSM_PARAM": docker_name,
        "DOCKER_ORG_PAT_SSM_PARAM": docker_pat,
        "EXTRA_SRC_KEYS": " ".join(extra_keys),
    }
    if cfg.worker_user:
        values["WORKER_USER"] = cfg.worker_user
    if cfg.worker_setup:
        values["WORKER_SETUP"] = cfg.worker_setup
    return values


def _run_config(path: Path | None, attack: str | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(option defaults, ec2_args) from a YAML run config; the chosen attack's keys win."""
    if path is None:
        if attack:
            raise BadInput("--attack needs --config")
        return {}, {}
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise BadInput(f"{path}: not valid YAML ({exc})") from None
    if not isinstance(data, dict):
        raise BadInput(f"{path}: expected a mapping (task_file, policy, epochs, ec2_args, attacks)")
    allowed = {"task_file", "policy", "epochs", "model", "ec2_args", "attacks"}
    unknown = set(data) - allowed
    if unknown:
        raise BadInput(f"{path}: unknown key(s) {', '.join(sorted(unknown))}; allowed: {', '.join(sorted(allowed))}")
    options = {k: data[k] for k in ("task_file", "policy", "epochs", "model") if k in data}
    ec2_args = config.from_mapping(data.get("ec2_args") or {}, f"{path}: ec2_args")
    attacks = data.get("attacks") or []
    names = [str(a.get("name")) for a in attacks if isinstance(a, dict)]
    if attacks and attack is None and len(attacks) > 1:
        raise BadInput(f"{path} has several attacks: choose one with --attack ({', '.join(names)})")
    if attacks:
        chosen = attacks[0] if attack is None else next((a for a in attacks if str(a.get("name")) == attack), None)
        if chosen is None:
            raise BadInput(f"no attack {attack!r} in {path}: choose one of {', '.join(names)}")
        options.update({k: chosen[k] for k in ("policy", "epochs", "model", "task_file") if k in chosen})
        ec2_args.update(config.from_mapping(chosen.get("ec2_args") or {}, f"{path}: attack {chosen.get('name')}"))
    elif attack:
        raise BadInput(f"{path} has no attacks")
    return options, ec2_args


@cli.command(name="eval", epilog=_knob_help())
@click.option("--task-file", help="named task set (examples/task_sets/NAME.yml|.jsonl) or a path")
@click.option("-e", "--env", "envs", multiple=True, help="environment (repeatable); setting:env picks the setting")
@click.option("-t", "--main-task", "mains", multiple=True, help="main task within the selected envs (repeatable)")
@click.option("-s", "--side-task", "sides", multiple=True, help="side task within the selected envs (repeatable)")
@click.option("--policy", help="honest (default), attack, or module:function")
@click.option("--epochs", type=int, help="epochs per sample (default 1); one job per sample x epoch")
@click.option("--model", help="Inspect model the policy may call (default mockllm/model)")
@click.option("--command", "command", help="run each job as this shell command; it must write one .eval to $CT_OUTPUT")
@click.option("--sandbox", help="external sandbox as module:type, imported on each worker")
@click.option("--extra-src", "extra_src", multiple=True, type=click.Path(path_type=Path), help="with --ec2: also ship DIR as an import root on workers (repeatable)")
@click.option("--config", "config_path", type=click.Path(exists=True, dir_okay=False, path_type=Path), help="YAML run config: task_file, policy, epochs, ec2_args, attacks")
@click.option("--attack", help="which attack of --config to run (its ec2_args win)")
@click.option("--ec2", is_flag=True, help="run on EC2 instead of the embedded local cloud")
@click.option("--ec2-arg", "ec2_args", multiple=True, metavar="KEY=VALUE", help="fleet knob (repeatable; listed below)")
def eval_command(
    task_file: str | None,
    envs: tuple[str, ...],
    mains: tuple[str, ...],
    sides: tuple[str, ...],
    policy: str | None,
    epochs: int | None,
    model: str | None,
    command: str | None,
    sandbox: str | None,
    extra_src: tuple[Path, ...],
    config_path: Path | None,
    attack: str | None,
    ec2: bool,
    ec2_args: tuple[str, ...],
) -> None:
    """Run tasks x epochs as one fleet and merge the results into one Inspect run.

    \b
    Examples:
      ct-fleet eval --task-file smoke --policy honest --epochs 3
      ct-fleet eval -e web -t fix_login --policy attack -s leak_secret
      ct-fleet eval --ec2 --task-file medium --epochs 10 --ec2-arg max_workers=20
      ct-fleet eval --ec2 --extra-src ~/experiments --policy mypkg.policies:my_policy -e web

    A rerun of the same command resumes: only jobs without a finished result run again.
    Results land in runs/<fleet_id>/ (per-job logs in results/, the merged run in merged/).
    """
    defaults, config_args = _run_config(config_path, attack)
    task_file = task_file or defaults.get("task_file")
    policy = policy or defaults.get("policy") or "honest"
    epochs = epochs if epochs is not None else int(defaults.get("epochs", 1))
    model = model or defaults.get("model") or "mockllm/model"
    cfg = config.build_config(config_args, config.parse_ec2_args(ec2_args)).resolved(embedded=not ec2)
    extra = preflight.check_extra_src(extra_src, ec2=ec2)
    setting_name, env_names = preflight.split_env_args(envs)
    setting, tasks = _tasks(setting_name, task_file, env_names, mains, sides)
    preflight.check_policy(policy, setting, extra, ec2=ec2)
    if sandbox:
        preflight.check_ref("--sandbox", sandbox, extra, ec2=ec2)
    setup_digest = preflight.worker_setup_digest(cfg.worker_setup, extra)
    jobs = plan.make_jobs(tasks, epochs, policy, setting)
    version = code.code_version(REPO_ROOT)
    fleet_id = plan.fleet_id(
        version.sha,
        policy,
        tasks,
        epochs,
        model=model,
        command=command,
        sandbox=sandbox,
        instance_type=cfg.instance_type if ec2 else None,
        worker_setup=f"{cfg.worker_setup}:{setup_digest}" if setup_digest else None,
        extra_src=[p.name for p in extra] or None,
        # A fresh fleet gets its own id, so nothing of an earlier run with the same inputs is reused.
        fresh=time.time_ns() if cfg.new_fleet else None,
    )
    dotenv = credentials.read_dotenv(DOTENV)
    if ec2:
        credentials.apply_aws_credentials(dotenv)
    spec = FleetSpec(
        fleet_id=fleet_id,
        setting=setting_name,
        task_spec=setting.task_spec,
        policy=policy,
        model=model,
        epochs=epochs,
        tasks=tasks,
        jobs=jobs,
        code_sha=version.sha,
        config=cfg,
        command=command,
        sandbox=sandbox,
        hourly_price=cost.hourly_price(cfg.instance_type, cfg.hourly_price) if ec2 else 0.0,
    )
    if ec2 and not _confirm_cost(spec):
        return
    if version.untracked:
        err.print(f"[yellow]warning:[/] {version.untracked} untracked file(s) will not ship to workers (git add them)")
    run_dir = RUNS_DIR / fleet_id
    run_dir.mkdir(parents=True, exist_ok=True)
    tarball = code.archive(REPO_ROOT, version.sha, run_dir / "code.tar.gz")
    cloud = connect_aws(cfg.region or "us-east-1") if ec2 else start_embedded(run_dir, cfg.region or "us-east-1")
    leave_running = False
    try:
        result = _run(cloud, spec, run_dir, tarball, dotenv, extra)
    except FleetInterrupted as exc:
        leave_running = exc.leave_running
        if leave_running:
            err.print(f"fleet {fleet_id} left running: rerun the same command to resume it", highlight=False)
        else:
            err.print(f"fleet {fleet_id} stopped; finished results are kept in {run_dir}/results", highlight=False)
        sys.exit(130)
    finally:
        cloud.close(leave_running=leave_running)
    _report(result)
    if result.stopped_reason or result.dead_report:
        sys.exit(1)


def _confirm_cost(spec: FleetSpec) -> bool:
    """Show the estimate; launch only when confirmed (or auto_confirm). estimate=true stops here."""
    cfg = spec.config
    seen = cost.seen_duration(RUNS_DIR, spec.setting, spec.policy)
    seconds, source = (seen[0], f"mean of {seen[1]} earlier jobs") if seen else (float(cfg.sample_time_limit), "sample_time_limit (upper bound)")
    est = cost.estimate(
        jobs=len(spec.jobs),
        workers=first_launch_count(len(spec.jobs), cfg),
        concurrency=min(START_CONCURRENCY, cfg.concurrency_per_worker or START_CONCURRENCY),
        seconds_per_job=seconds,
        source=source,
        price=spec.hourly_price,
        baked_ami=True,
    )
    console.print(estimate_table(est, cfg.instance_type))
    if cfg.estimate:
        return False
    if cfg.auto_confirm:
        return True
    if not sys.stdin.isatty():
        raise BadInput("cannot ask for confirmation without a terminal: pass --ec2-arg auto_confirm=true")
    return click.confirm(f"launch up to {est.workers} {cfg.instance_type} worker(s) for about ${est.total:.2f}?", default=False)


def _run(cloud: Cloud, spec: FleetSpec, run_dir: Path, tarball: Path, dotenv: dict[str, str], extra: list[Path]) -> RunResult:
    cfg = spec.config
    if cloud.embedded:
        prepare_embedded_account(cloud, bucket=cfg.bucket, instance_profile=cfg.instance_profile, ami_param=cfg.ami_param)
    else:
        store.ensure_bucket(cloud.client("s3"), cfg.bucket, create=False)
        fleet.resolve_ami(cloud.client("ec2"), cloud.client("ssm"), cfg)  # a missing AMI stops here
    cloud.attach_runner(run_dir / "instances")
    sts = cloud.client("sts")
    launched_by = credentials.launched_by(sts)
    account = sts.get_caller_identity()["Account"]
    secrets = credentials.worker_secrets(dotenv)
    extra_keys = [
        code.upload_extra_src(cloud.client("s3"), cfg.bucket, path, run_dir / f"extra-{path.name}.tar.gz") for path in extra
    ]
    console.print(
        f"fleet [bold]{spec.fleet_id}[/]: {len(spec.jobs)} jobs ({len(spec.tasks)} tasks x {spec.epochs} epochs), "
        f"policy {spec.policy}, {cloud.kind} cloud, up to {cfg.max_workers} workers x {cfg.concurrency_per_worker}",
        highlight=False,
    )
    if not cloud.embedded:
        console.print(f"EC2 console: {fleet.console_link(cloud.region, spec.fleet_id)}", highlight=False, soft_wrap=True)
    with LiveProgress(console) as live:
        controller = Controller(
            cloud,
            spec,
            run_dir,
            launched_by=launched_by,
            account=account,
            secrets=secrets,
            on_progress=live.update,
            warn=lambda text: err.print(f"[yellow]warning:[/] {text}", highlight=False),
            leave_running_on_interrupt=_ask_leave_running,
        )
        return controller.run(tarball, _worker_settings(spec, cloud, secrets, extra_keys))


def _ask_leave_running() -> bool:
    if not sys.stdin.isatty():
        return False
    answer = click.prompt(
        "\ninterrupted: stop the fleet, or leave its workers running for a later resume?",
        type=click.Choice(["stop", "leave"]),
        default="stop",
    )
    return answer == "leave"


def _report(result: RunResult) -> None:
    state = result.state
    console.print(
        f"fleet {result.fleet_id}: {result.jobs} jobs ({result.resumed} already done), "
        f"{result.workers_launched} workers"
        + (f" ({result.adopted_workers} adopted)" if result.adopted_workers else "")
        + f", {result.elapsed:.1f}s; enqueued {result.enqueued}, attempts {state.attempts}, "
        f"redeliveries {state.redeliveries}, duplicates dropped {state.duplicates}"
        + (f", cost ${result.cost:.2f}" if result.cost else ""),
        highlight=False,
    )
    if result.merged:
        console.print(summary_table(result.merged))
    if result.dead_report:
        console.print(dead_table(result.dead_report))
        for row in result.dead_report:
            console.print(f"  {row['rerun']}    # {row['sample_id']} epoch {row['epoch']}", highlight=False, soft_wrap=True)
    if result.stopped_reason:
        err.print(f"[bold red]stopped:[/] {result.stopped_reason}", highlight=False)


@cli.command(name="merge")
@click.argument("src", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("-o", "--out", type=click.Path(file_okay=False, path_type=Path), help="output directory (default SRC/merged)")
def merge_command(src: Path, out: Path | None) -> None:
    """Merge a directory of one-sample .eval logs into one Inspect run per task.

    Streams: sample entries are copied without being decoded, so memory stays flat.
    """
    from .merge import merge_dir

    merged = merge_dir(src, out or src / "merged")
    if not merged:
        raise BadInput(f"no .eval files under {src}")
    console.print(summary_table(merged))


@cli.command(name="run-job")
@click.argument("fleet_id")
@click.argument("job_id")
def run_job_command(fleet_id: str, job_id: str) -> None:
    """Run one job of a fleet here, as a worker would, to debug it.

    \b
    Reads runs/FLEET_ID/manifest.json and writes runs/FLEET_ID/rerun/JOB_ID.eval.
    The dead-letter report of a run prints this command for every job that failed.
    """
    import subprocess

    from .evalfile import read_header, sample_error
    from .protocol import WorkMessage

    path = RUNS_DIR / fleet_id / "manifest.json"
    if not path.exists():
        raise BadInput(f"no manifest at {path}: run the fleet from this checkout first")
    manifest = json.loads(path.read_text())
    job = next((j for j in manifest["jobs"] if j["job_id"] == job_id), None)
    if job is None:
        raise BadInput(f"fleet {fleet_id} has no job {job_id}")
    message = WorkMessage(
        fleet_id=fleet_id, job_id=job_id, sample_id=job["sample_id"], epoch=job["epoch"],
        task_spec=manifest["task_spec"], task_args={"policy": manifest["policy"]}, model=manifest["model"],
        code_sha=manifest["code_sha"], result_key="", time_limit=int(manifest["config"].get("sample_time_limit", 0)),
        kind="command" if manifest.get("command") else "inspect", command=manifest.get("command"),
        setting=manifest["setting"], sandbox=manifest.get("sandbox"),
    )
    out = RUNS_DIR / fleet_id / "rerun" / f"{job_id}.eval"
    out.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT / "lib"), str(SETTINGS_DIR), str(REPO_ROOT)])}
    console.print(f"running {job['sample_id']} epoch {job['epoch']} of fleet {fleet_id} here", highlight=False)
    proc = subprocess.run([sys.executable, "-m", "ct_fleet.runner", message.to_json(), str(out)], cwd=REPO_ROOT, env=env)
    header = read_header(out) if out.exists() else None
    if proc.returncode != 0 or header is None:
        err.print(f"[bold red]job failed[/] (runner exit {proc.returncode})")
        sys.exit(1)
    error = sample_error(header)
    console.print(f"{'sample error: ' + error if error else 'success'}; log: {out}", highlight=False)


@cli.group(name="cloud")
def cloud_group() -> None:
    """Operate the fleet's cloud resources: the worker AMI, what is running."""


def _aws_cloud(region: str | None) -> Cloud:
    """Commands that look at the real fleet: credentials as for --ec2."""
    credentials.apply_aws_credentials(credentials.read_dotenv(DOTENV))
    return connect_aws(region or os.environ.get("AWS_REGION") or "us-east-1")


region_option = click.option("--region", help="AWS region (default: AWS_REGION, else us-east-1)")
bucket_option = click.option("--bucket", default=config.Ec2Config().bucket, show_default=True, help="results bucket")


@cloud_group.command(name="status")
@click.option("--all-users", is_flag=True, help="everyone's fleets, not just yours")
@region_option
def cloud_status_command(all_users: bool, region: str | None) -> None:
    """Show running instances and fleet queues, grouped by fleet, with cost so far.

    Queue columns: work waiting / in flight, done waiting, dead letters.
    """
    cloud = _aws_cloud(region)
    me = None if all_users else credentials.launched_by(cloud.client("sts"))
    rows = observe.cloud_status(cloud.client("ec2"), cloud.client("sqs"), launched_by=me)
    console.print(cloud_status_table(rows, datetime.now(timezone.utc)))
    if not rows:
        console.print(f"no fleets{'' if all_users else ' of ' + str(me)} running", highlight=False)


@cli.command(name="status")
@click.argument("fleet_id")
@region_option
@bucket_option
def status_command(fleet_id: str, region: str | None, bucket: str) -> None:
    """Show one fleet's progress from S3 and SQS; works from any machine with access."""
    cloud = _aws_cloud(region)
    st = observe.fleet_status(cloud.client("s3"), cloud.client("sqs"), cloud.client("ec2"), bucket, fleet_id)
    console.print(run_status_table(st))


@cli.command(name="logs")
@click.argument("fleet_id")
@click.argument("instance_id", required=False)
@click.option("-o", "--out", type=click.Path(file_okay=False, path_type=Path), help="download into this directory instead of printing")
@region_option
@bucket_option
def logs_command(fleet_id: str, instance_id: str | None, out: Path | None, region: str | None, bucket: str) -> None:
    """Print (or download) the bootstrap logs of a fleet's workers, each step with its timing."""
    cloud = _aws_cloud(region)
    s3 = cloud.client("s3")
    keys = observe.log_keys(s3, bucket, fleet_id, instance_id)
    if not keys:
        raise BadInput(f"no bootstrap logs under s3://{bucket}/{fleet_id}/logs/{instance_id or ''}")
    for key in keys:
        if out:
            out.mkdir(parents=True, exist_ok=True)
            s3.download_file(bucket, key, str(out / key.rsplit("/", 1)[-1]))
            console.print(f"downloaded {key}", highlight=False)
        else:
            console.rule(key)
            console.print(s3.get_object(Bucket=bucket, Key=key)["Body"].read().decode(errors="replace"), highlight=False, markup=False)


@cli.command(name="ssh")
@click.argument("instance_id")
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

    cloud = _aws_cloud(region)
    reservations = cloud.client("ec2").describe_instances(InstanceIds=[instance_id])["Reservations"]
    inst = reservations[0]["Instances"][0]
    key_dir = Path(tempfile.mkdtemp(prefix="ct-fleet-ssh-"))
    key = key_dir / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    cloud.client("ec2-instance-connect").send_ssh_public_key(
        InstanceId=instance_id, InstanceOSUser=user, SSHPublicKey=key.with_suffix(".pub").read_text(),
        AvailabilityZone=inst["Placement"]["AvailabilityZone"],
    )
    proxy = f"aws ec2-instance-connect open-tunnel --instance-id {instance_id} --region {cloud.region}"
    cmd = ["ssh", "-i", str(key), "-o", f"ProxyCommand={proxy}", "-o", "StrictHostKeyChecking=accept-new", f"{user}@{instance_id}"]
    if dry_run:
        console.print(shlex.join(cmd), highlight=False, soft_wrap=True)
        return
    os.execvp("ssh", cmd)


def _register_cloud_commands() -> None:
    from .cli_cloud_ami import build_ami

    cloud_group.add_command(build_ami, name="build-ami")


_register_cloud_commands()


def main() -> None:
    cli(prog_name="ct-fleet")


if __name__ == "__main__":
    main()

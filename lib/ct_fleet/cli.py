"""ct-fleet's command line. One function per command; `ct-fleet COMMAND --help` teaches each."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

import click
from rich.console import Console

from . import code, config, credentials, plan
from .cloud import Cloud, connect_aws, prepare_embedded_account, start_embedded
from .controller import Controller, FleetSpec, RunResult
from .display import LiveProgress, dead_table, summary_table
from .errors import BadInput
from .settings import DEFAULT_SETTING, REPO_ROOT, load_setting

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


def _tasks(setting_name: str, task_file: str | None, envs: Sequence[str], mains: Sequence[str], sides: Sequence[str]) -> tuple[object, list[plan.TaskSpec]]:
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


def _settings_and_envs(envs: Sequence[str]) -> tuple[str, list[str]]:
    """-e setting:env selects the setting; only the controller parses the prefix."""
    prefixed = [e for e in envs if ":" in e]
    if prefixed and len(prefixed) != len(envs):
        raise BadInput("either prefix every -e with its setting (setting:env) or none of them")
    if not prefixed:
        return DEFAULT_SETTING, list(envs)
    settings = list(dict.fromkeys(e.split(":", 1)[0] for e in prefixed))
    if len(settings) > 1:
        raise BadInput(f"one setting per run for now: got {', '.join(settings)}; run each setting separately")
    return settings[0], [e.split(":", 1)[1] for e in prefixed]


def _worker_settings(spec: FleetSpec, cloud: Cloud, secrets: dict[str, str]) -> dict[str, str]:
    cfg = spec.config
    from .secrets import prefix

    values = {
        "FLEET_ID": spec.fleet_id,
        "BUCKET": cfg.bucket,
        "CODE_SHA": spec.code_sha,
        "AWS_REGION": cloud.region,
        "CONCURRENCY": str(cfg.concurrency_per_worker),
        "IDLE_TIMEOUT": str(cfg.idle_timeout),
        "VISIBILITY_TIMEOUT": str(cfg.visibility_timeout),
        "HEARTBEAT_INTERVAL": str(cfg.heartbeat_interval),
        "SETTINGS": spec.setting,
        "SECRET_NAMES": " ".join(sorted(secrets)),
        "SECRET_PREFIX": prefix(spec.fleet_id),
        "SPOT": "true" if cfg.spot else "false",
    }
    if cfg.worker_user:
        values["WORKER_USER"] = cfg.worker_user
    if cfg.worker_setup:
        values["WORKER_SETUP"] = cfg.worker_setup
    return values


@cli.command(name="eval", epilog=_knob_help())
@click.option("--task-file", help="named task set (examples/task_sets/NAME.yml|.jsonl) or a path")
@click.option("-e", "--env", "envs", multiple=True, help="environment (repeatable); setting:env picks the setting")
@click.option("-t", "--main-task", "mains", multiple=True, help="main task within the selected envs (repeatable)")
@click.option("-s", "--side-task", "sides", multiple=True, help="side task within the selected envs (repeatable)")
@click.option("--policy", default="honest", show_default=True, help="honest, attack, or module:function")
@click.option("--epochs", type=int, default=1, show_default=True, help="epochs per sample; one job per sample x epoch")
@click.option("--model", default="mockllm/model", show_default=True, help="Inspect model the policy may call")
@click.option("--command", "command", help="run each job as this shell command; it must write one .eval to $CT_OUTPUT")
@click.option("--ec2", is_flag=True, help="run on EC2 instead of the embedded local cloud")
@click.option("--ec2-arg", "ec2_args", multiple=True, metavar="KEY=VALUE", help="fleet knob (repeatable; listed below)")
def eval_command(
    task_file: str | None,
    envs: tuple[str, ...],
    mains: tuple[str, ...],
    sides: tuple[str, ...],
    policy: str,
    epochs: int,
    model: str,
    command: str | None,
    ec2: bool,
    ec2_args: tuple[str, ...],
) -> None:
    """Run tasks x epochs as one fleet and merge the results into one Inspect run.

    \b
    Examples:
      ct-fleet eval --task-file smoke --policy honest --epochs 3
      ct-fleet eval -e web -t fix_login --policy attack -s leak_secret
      ct-fleet eval --ec2 --task-file medium --epochs 10 --ec2-arg max_workers=20

    A rerun of the same command resumes: only jobs without a finished result run again.
    Results land in runs/<fleet_id>/ (per-job logs in results/, the merged run in merged/).
    """
    cfg = config.build_config(config.parse_ec2_args(ec2_args)).resolved(embedded=not ec2)
    setting_name, env_names = _settings_and_envs(envs)
    setting, tasks = _tasks(setting_name, task_file, env_names, mains, sides)
    plan.check_policy(policy, setting)  # type: ignore[arg-type]
    jobs = plan.make_jobs(tasks, epochs, policy, setting)  # type: ignore[arg-type]
    version = code.code_version(REPO_ROOT)
    if version.untracked:
        err.print(f"[yellow]warning:[/] {version.untracked} untracked file(s) will not ship to workers (git add them)")
    fleet_id = plan.fleet_id(
        version.sha,
        policy,
        tasks,
        epochs,
        model=model,
        command=command,
        instance_type=cfg.instance_type if ec2 else None,
        worker_setup=cfg.worker_setup,
    )
    spec = FleetSpec(
        fleet_id=fleet_id,
        setting=setting_name,
        task_spec=setting.task_spec,  # type: ignore[attr-defined]
        policy=policy,
        model=model,
        epochs=epochs,
        tasks=tasks,
        jobs=jobs,
        code_sha=version.sha,
        config=cfg,
        command=command,
    )
    dotenv = credentials.read_dotenv(DOTENV)
    if ec2:
        credentials.apply_aws_credentials(dotenv)
    run_dir = RUNS_DIR / fleet_id
    run_dir.mkdir(parents=True, exist_ok=True)
    tarball = code.archive(REPO_ROOT, version.sha, run_dir / "code.tar.gz")
    cloud = connect_aws(cfg.region or "us-east-1") if ec2 else start_embedded(run_dir, cfg.region or "us-east-1")
    try:
        result = _run(cloud, spec, run_dir, tarball, dotenv)
    finally:
        cloud.close()
    _report(result)
    if result.stopped_reason or result.dead_report:
        sys.exit(1)


def _run(cloud: Cloud, spec: FleetSpec, run_dir: Path, tarball: Path, dotenv: dict[str, str]) -> RunResult:
    cfg = spec.config
    if cloud.embedded:
        prepare_embedded_account(cloud, bucket=cfg.bucket, instance_profile=cfg.instance_profile, ami_param=cfg.ami_param)
    cloud.attach_runner(run_dir / "instances")
    sts = cloud.client("sts")
    launched_by = credentials.launched_by(sts)
    account = sts.get_caller_identity()["Account"]
    secrets = credentials.worker_secrets(dotenv)
    console.print(
        f"fleet [bold]{spec.fleet_id}[/]: {len(spec.jobs)} jobs ({len(spec.tasks)} tasks x {spec.epochs} epochs), "
        f"policy {spec.policy}, {cloud.kind} cloud, up to {cfg.max_workers} workers x {cfg.concurrency_per_worker}",
        highlight=False,
    )
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
        )
        return controller.run(tarball, _worker_settings(spec, cloud, secrets))


def _report(result: RunResult) -> None:
    state = result.state
    console.print(
        f"fleet {result.fleet_id}: {result.jobs} jobs ({result.resumed} already done), "
        f"{result.workers_launched} workers, {result.elapsed:.1f}s; attempts {state.attempts}, "
        f"redeliveries {state.redeliveries}, duplicates dropped {state.duplicates}",
        highlight=False,
    )
    if result.merged:
        console.print(summary_table(result.merged))
    if result.dead_report:
        console.print(dead_table(result.dead_report))
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


@cli.group(name="cloud")
def cloud_group() -> None:
    """Operate the fleet's cloud resources: the worker AMI, what is running."""


def _register_cloud_commands() -> None:
    from .cli_cloud_ami import build_ami

    cloud_group.add_command(build_ami, name="build-ami")


_register_cloud_commands()


def main() -> None:
    cli(prog_name="ct-fleet")


if __name__ == "__main__":
    main()

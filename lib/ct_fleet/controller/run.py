"""A fleet run from request to result: the library entry point behind `ct-fleet eval`.

    from ct_fleet import FleetRequest, run_fleet

    result = run_fleet(FleetRequest(task_file="smoke", policy="honest", epochs=3))
    print(result.fleet_id, [m.path for m in result.merged], result.cost)

`plan_fleet` validates everything and decides the fleet (its id, jobs and cloud) without
creating, launching or uploading anything; `execute` then runs it. The CLI calls the two
with a cost confirmation in between; `run_fleet` calls both.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..cloud import Cloud, open_cloud
from ..errors import BadInput
from ..paths import REPO_ROOT
from ..protocol import START_CONCURRENCY, FleetEnv, secrets_prefix
from ..settings import Setting, load_setting
from . import code, config, cost, credentials, docker_prep, interrupts, plan, preflight, sweep
from .loop import Controller
from .resume import check_resume
from .runconfig import load_run_config
from .scaling import first_launch_count
from .spec import FleetSpec, Progress, RunResult
from .task_args import merge_policy, parse_task_args

RUNS_DIR = Path(os.environ.get("CT_FLEET_RUNS", REPO_ROOT / "runs"))
DOTENV = Path(os.environ.get("CT_FLEET_DOTENV", REPO_ROOT / ".env"))


@dataclass
class FleetRequest:
    """What a researcher asks for; the fields of `ct-fleet eval`."""

    task_file: str | None = None
    envs: Sequence[str] = ()
    main_tasks: Sequence[str] = ()
    side_tasks: Sequence[str] = ()
    policy: str | None = None
    epochs: int | None = None
    model: str | None = None
    task_args: Sequence[str] = ()  # -T key=value pairs, as on the command line
    command: str | None = None
    sandbox: str | None = None
    extra_src: Sequence[Path] = ()
    config_path: Path | None = None
    attack: str | None = None
    ec2: bool = False
    ec2_args: Sequence[str] = ()  # key=value pairs, as on the command line
    runs_dir: Path = field(default_factory=lambda: RUNS_DIR)
    dotenv: Path = field(default_factory=lambda: DOTENV)


@dataclass
class RunHooks:
    """How a run talks to whoever drives it (the CLI's console, or nothing)."""

    info: Callable[[str], None] = lambda text: None
    warn: Callable[[str], None] = lambda text: None
    on_progress: Callable[[Progress], None] = lambda p: None
    leave_running_on_interrupt: Callable[[], bool] = lambda: False


@dataclass
class PlannedFleet:
    """A validated fleet, not yet started: nothing exists in any cloud yet."""

    spec: FleetSpec
    cloud: Cloud
    setting: Setting
    extra_src: list[Path]
    dotenv: dict[str, str]
    untracked: int
    run_dir: Path
    runs_dir: Path
    docker_images: list[str] = field(default_factory=list)  # what its sandboxes run; [] needs no Docker
    notes: list[str] = field(default_factory=list)  # warnings to show before the run starts

    @property
    def large(self) -> bool:
        """So many jobs that the user is asked to confirm (a typo in --epochs costs hours)."""
        return len(self.spec.jobs) > plan.LARGE_RUN_JOBS

    def estimate(self) -> cost.Estimate:
        """The cost estimate shown before launch (durations of earlier fleets when known)."""
        cfg = self.spec.config
        seen = cost.seen_duration(self.runs_dir, self.spec.setting, self.spec.policy)
        seconds, source = (
            (seen[0], f"mean of {seen[1]} earlier jobs")
            if seen
            else (float(cfg.sample_time_limit), "sample_time_limit (upper bound)")
        )
        return cost.estimate(
            jobs=len(self.spec.jobs),
            workers=first_launch_count(
                len(self.spec.jobs), max_workers=cfg.max_workers, concurrency_per_worker=cfg.concurrency_per_worker
            ),
            concurrency=min(START_CONCURRENCY, cfg.concurrency_per_worker or START_CONCURRENCY),
            seconds_per_job=seconds,
            source=source,
            price=self.spec.hourly_price,
            baked_ami=True,
        )


def _tasks(
    setting_name: str, task_file: str | None, envs: Sequence[str], mains: Sequence[str], sides: Sequence[str]
) -> tuple[Setting, list[plan.TaskSpec]]:
    setting = load_setting(setting_name)
    catalog = preflight.check_setting(setting)
    if task_file:
        if envs or mains or sides:
            raise BadInput("use either --task-file or -e/-t/-s, not both")
        tasks = plan.load_task_file(plan.resolve_task_file(task_file))
    else:
        tasks = plan.select_tasks(catalog, envs, mains, sides)
    plan.validate_tasks(tasks, catalog)
    return setting, plan.dedupe(tasks)


def plan_fleet(request: FleetRequest) -> PlannedFleet:
    """Validate the request and decide the fleet; raises BadInput, changes nothing."""
    defaults, config_args = load_run_config(request.config_path, request.attack)
    task_file = request.task_file or defaults.get("task_file")
    policy = request.policy or defaults.get("policy") or "honest"
    epochs = request.epochs if request.epochs is not None else defaults.get("epochs", 1)
    model = request.model or defaults.get("model") or "mockllm/model"
    built = config.build_config(config_args, config.parse_ec2_args(request.ec2_args))
    cloud = open_cloud(ec2=request.ec2, region=built.region or "us-east-1")
    cfg = built.with_defaults(cloud.defaults)
    cloud.region = cfg.region or cloud.region
    strict = cloud.requires_shipped_refs
    trees = preflight.check_extra_src(request.extra_src, ec2=strict)
    extra = [tree.root for tree in trees]
    preflight.check_model(model)
    preflight.docker_auth_params(dict(os.environ))
    preflight.check_command(request.command)
    setting_name, env_names = preflight.split_env_args(request.envs)
    setting, tasks = _tasks(setting_name, task_file, env_names, request.main_tasks, request.side_tasks)
    preflight.check_policy(policy, setting, extra, ec2=strict)
    task_args = parse_task_args(request.task_args)
    job_task_args = merge_policy(policy, task_args)
    setting.check_task_args(task_args)
    if request.sandbox:
        preflight.check_ref("--sandbox", request.sandbox, extra, ec2=strict)
    setup_digest = preflight.worker_setup_digest(cfg.worker_setup, extra)
    jobs = plan.make_jobs(tasks, epochs, policy, setting)
    version = code.code_version(REPO_ROOT)
    fleet_id = cfg.resume or plan.fleet_id(
        version.sha,
        policy,
        tasks,
        epochs,
        model=model,
        task_args=task_args or None,
        command=request.command,
        sandbox=request.sandbox,
        worker_setup=f"{cfg.worker_setup}:{setup_digest}" if setup_digest else None,
        extra_src=[p.name for p in extra] or None,
        # A fresh fleet gets its own id, so nothing of an earlier run with the same inputs is reused.
        fresh=time.time_ns() if cfg.new_fleet else None,
        **cloud.fleet_identity(cfg),
    )
    if cfg.resume:
        check_resume(request.runs_dir / fleet_id, [job.job_id for job in jobs], version.sha)
    dotenv = credentials.read_dotenv(request.dotenv)
    cloud.check_credentials(dotenv)
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
        task_args=job_task_args,
        command=request.command,
        sandbox=request.sandbox,
        hourly_price=cloud.hourly_price(cfg),
    )
    return PlannedFleet(
        spec=spec,
        cloud=cloud,
        setting=setting,
        extra_src=extra,
        dotenv=dotenv,
        untracked=version.untracked,
        run_dir=request.runs_dir / fleet_id,
        runs_dir=request.runs_dir,
        docker_images=docker_prep.sandbox_images(setting, job_task_args),
        notes=[note for tree in trees if (note := tree.note())],
    )


def fleet_env(spec: FleetSpec, cloud: Cloud, secrets: dict[str, str], extra_keys: list[str]) -> FleetEnv:
    """The fleet's settings as a worker boots with them: names and knobs, never a secret value."""
    cfg = spec.config
    docker_name, docker_pat = preflight.docker_auth_params(dict(os.environ))
    return FleetEnv(
        FLEET_ID=spec.fleet_id,
        BUCKET=cfg.bucket,
        CODE_SHA=spec.code_sha,
        AWS_REGION=cloud.region,
        CONCURRENCY=cfg.concurrency_per_worker or START_CONCURRENCY,
        IDLE_TIMEOUT=cfg.idle_timeout if cfg.idle_timeout is not None else 0,
        VISIBILITY_TIMEOUT=cfg.visibility_timeout,
        HEARTBEAT_INTERVAL=cfg.heartbeat_interval,
        RETRY_BACKOFF=cfg.retry_backoff,
        SETTINGS=spec.setting,
        SECRET_NAMES=" ".join(sorted(secrets)),
        SECRET_PREFIX=secrets_prefix(spec.fleet_id),
        SPOT=cfg.spot,
        DOCKER_ORG_NAME_SSM_PARAM=docker_name,
        DOCKER_ORG_PAT_SSM_PARAM=docker_pat,
        EXTRA_SRC_KEYS=" ".join(extra_keys),
        WORKER_USER=cfg.worker_user or "",
        WORKER_SETUP=cfg.worker_setup or "",
        # a fleet of command jobs has no use for a process with inspect_ai imported
        WARM_RUNNER=cfg.warm_runner and not spec.command,
        JOB_MEMORY_MB=cfg.job_memory_mb,
    )


def execute(planned: PlannedFleet, hooks: RunHooks | None = None) -> RunResult:
    """Start the cloud, run the fleet to its end, merge; the cloud is closed on every exit.

    Raises FleetInterrupted on Ctrl-C (the fleet stopped, or deliberately left running).
    """
    hooks = hooks or RunHooks()
    spec, run_dir = planned.spec, planned.run_dir
    if planned.untracked:
        hooks.warn(f"{planned.untracked} untracked file(s) will not ship to workers (git add them)")
    for note in planned.notes:
        hooks.warn(note)
    run_dir.mkdir(parents=True, exist_ok=True)
    tarball = code.archive(REPO_ROOT, spec.code_sha, run_dir / "code.tar.gz")
    with interrupts.stop_signals():
        return _execute(planned, hooks, tarball)


def _execute(planned: PlannedFleet, hooks: RunHooks, tarball: Path) -> RunResult:
    spec, cloud, run_dir = planned.spec, planned.cloud, planned.run_dir
    cfg = spec.config
    cloud.start(run_dir, planned.dotenv)
    leave_running = False
    docker: docker_prep.DockerLease | None = None
    try:
        if planned.docker_images and cloud.instances_run_here():
            docker = docker_prep.prepare(planned.setting, planned.docker_images, run_dir / "docker.log", hooks.info)
        cloud.prepare_account(cfg)
        swept = sweep.sweep_orphan_secrets(cloud.client("ssm"), cloud.client("ec2"))
        if swept:
            hooks.warn(
                f"deleted {sum(swept.values())} secret(s) left by stopped fleet(s) {', '.join(sorted(swept))} "
                "(their controller died before its teardown)"
            )
        cloud.attach_runner(run_dir / "instances")
        sts = cloud.client("sts")
        launched_by = credentials.launched_by(sts)
        account = sts.get_caller_identity()["Account"]
        secrets = credentials.worker_secrets(planned.dotenv)
        s3 = cloud.client("s3")
        extra_keys = [
            code.upload_extra_src(s3, cfg.bucket, path, run_dir / f"extra-{path.name}.tar.gz")
            for path in planned.extra_src
        ]
        hooks.info(
            f"fleet {spec.fleet_id}: {len(spec.jobs)} jobs ({len(spec.tasks)} tasks x {spec.epochs} epochs), "
            f"policy {spec.policy}, {cloud.kind} cloud, up to {cfg.max_workers} workers x {cfg.concurrency_per_worker}"
        )
        link = cloud.console_link(spec.fleet_id)
        if link:
            hooks.info(f"EC2 console: {link}")
        controller = Controller(
            cloud,
            spec,
            run_dir,
            launched_by=launched_by,
            account=account,
            secrets=secrets,
            on_progress=hooks.on_progress,
            warn=hooks.warn,
            leave_running_on_interrupt=hooks.leave_running_on_interrupt,
        )
        try:
            return controller.run(tarball, fleet_env(spec, cloud, secrets, extra_keys))
        except BaseException as exc:
            leave_running = bool(getattr(exc, "leave_running", False))
            raise
    finally:
        cloud.close(leave_running=leave_running)
        if docker is not None and not leave_running:
            docker.release()


def run_fleet(request: FleetRequest | None = None, *, hooks: RunHooks | None = None, **fields: Any) -> RunResult:
    """Plan and run a fleet: `run_fleet(task_file="smoke", epochs=3)` or with a FleetRequest.

    A billing cloud (--ec2) needs `ec2_args=["auto_confirm=true"]`: there is nobody to ask.
    """
    request = request or FleetRequest(**fields)
    planned = plan_fleet(request)
    if planned.cloud.bills and not planned.spec.config.auto_confirm:
        raise BadInput("run_fleet on a billing cloud needs ec2_args=['auto_confirm=true'] (no one to confirm the cost)")
    if planned.large and not planned.spec.config.auto_confirm:
        raise BadInput(
            f"{len(planned.spec.jobs):,} jobs is a large run: pass ec2_args=['auto_confirm=true'] to start it"
        )
    return execute(planned, hooks)


def exit_status(result: RunResult) -> int:
    """0 only for a complete, successful run."""
    return 1 if result.stopped_reason or result.dead_report else 0


__all__ = ["FleetRequest", "PlannedFleet", "RunHooks", "execute", "exit_status", "fleet_env", "plan_fleet", "run_fleet"]

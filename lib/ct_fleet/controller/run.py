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
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..cloud import Cloud, open_cloud
from ..errors import BadInput
from ..paths import REPO_ROOT
from ..protocol import START_CONCURRENCY, FleetEnv, secrets_prefix
from ..settings import DEFAULT_SETTING, SettingSources
from . import (
    code,
    config,
    cost,
    credentials,
    docker_prep,
    interrupts,
    models,
    plan,
    preflight,
    setting_plan,
    sweep,
    tasks,
)
from .lease import LocalLock
from .loop import Controller
from .resume import check_resume
from .runconfig import load_run_config
from .scaling import first_launch_count
from .shipped import ShippedCode
from .spec import FleetSpec, Progress, RunResult
from .task_args import parse_kv

RUNS_DIR = Path(os.environ.get("CT_FLEET_RUNS", REPO_ROOT / "runs"))
DOTENV = Path(os.environ.get("CT_FLEET_DOTENV", REPO_ROOT / ".env"))


@dataclass
class FleetRequest:
    """What a researcher asks for; the fields of `ct-fleet eval`."""

    task: str | None = None  # a plain Inspect task: file.py, file.py@name or a registered name
    task_args: Sequence[str] = ()  # -T key=value
    model_args: Sequence[str] = ()  # -M key=value
    sample_ids: Sequence[str] = ()  # --sample-id ID[,ID...]
    limit: str | None = None  # --limit N or START-STOP
    task_file: str | None = None
    envs: Sequence[str] = ()
    main_tasks: Sequence[str] = ()
    side_tasks: Sequence[str] = ()
    policy: str | None = None
    epochs: int | None = None
    model: str | None = None
    command: str | None = None
    sandbox: str | None = None
    extra_src: Sequence[Path] = ()
    config_path: Path | None = None
    attack: str | None = None
    ec2: bool | None = None  # None: the run config's `ec2:`, else CT_FLEET_EC2, else the local fleet
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
    shipped: ShippedCode
    dotenv: dict[str, str]
    untracked: int
    run_dir: Path
    runs_dir: Path
    docker: docker_prep.DockerNeeds = field(default_factory=docker_prep.DockerNeeds)
    notes: list[str] = field(default_factory=list)  # warnings to show before the run starts

    @property
    def docker_images(self) -> list[str]:
        return self.docker.images

    @property
    def large(self) -> bool:
        """So many jobs that the user is asked to confirm (a typo in --epochs costs hours)."""
        return len(self.spec.jobs) > plan.LARGE_RUN_JOBS

    def estimate(self) -> cost.Estimate:
        """The cost estimate shown before launch (durations of earlier fleets when known)."""
        cfg = self.spec.config
        seen = cost.seen_duration(self.runs_dir, *self.spec.duration_group)
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


def _split_list(value: str | Sequence[str] | None) -> list[str]:
    """a,b,c (or a list of such) -> [a, b, c]."""
    parts = [value] if isinstance(value, str) else list(value or [])
    return [p.strip() for part in parts for p in str(part).split(",") if p.strip()]


def _use_ec2(request: FleetRequest, defaults: dict[str, Any]) -> bool:
    if request.ec2 is not None:
        return request.ec2
    if "ec2" in defaults:
        return bool(defaults["ec2"])
    return os.environ.get("CT_FLEET_EC2", "").strip().lower() in ("1", "true", "yes", "on")


def _locate_task(
    request: FleetRequest, task: str, defaults: dict[str, Any], extra: list[Path]
) -> tuple[tasks.Located, list[Path]]:
    """TASK and its selection, located; the extra trees, with the task's own directory if it needs one."""
    if request.task_file or request.envs or request.main_tasks or request.side_tasks:
        raise BadInput("a plain Inspect task takes no --task-file or -e/-t/-s: those select a setting's tasks")
    if request.policy or defaults.get("policy"):
        raise BadInput("--policy applies to settings; a plain task takes its solver from -T arguments")
    located = tasks.locate(task, REPO_ROOT, extra)
    if located.implicit_tree is not None:
        clash = next((p for p in extra if p.name == located.implicit_tree.name), None)
        if clash is not None:
            raise BadInput(
                f"task {task}: its directory {located.implicit_tree} would ship under the same name as "
                f"--extra-src {clash}: pass its directory with --extra-src instead"
            )
        extra = [*extra, located.implicit_tree]
    return located, extra


def plan_fleet(request: FleetRequest) -> PlannedFleet:
    """Validate the request and decide the fleet; raises BadInput, changes nothing."""
    defaults, config_args = load_run_config(request.config_path, request.attack)
    task = request.task or defaults.get("task")
    model = request.model or defaults.get("model") or "mockllm/model"
    user_args = {**config_args, **config.parse_ec2_args(request.ec2_args)}
    built = config.build_config(user_args)
    cloud = open_cloud(ec2=_use_ec2(request, defaults), region=built.region or "us-east-1")
    cfg = built.with_defaults(cloud.defaults)
    cloud.region = cfg.region or cloud.region
    trees = preflight.check_extra_src(request.extra_src)
    extra = [tree.root for tree in trees]
    preflight.docker_auth_params(dict(os.environ))
    preflight.docker_registry(dict(os.environ))
    preflight.check_command(request.command)
    task_args = {**(defaults.get("task_args") or {}), **parse_kv(request.task_args, "-T")}
    model_args = {**(defaults.get("model_args") or {}), **parse_kv(request.model_args, "-M")}
    requirements = [*_split_list(cfg.setting_requirements), *_split_list(defaults.get("requirements"))]
    reqs = setting_plan.plan_requirements(requirements)
    located = None
    if task:
        located, extra = _locate_task(request, task, defaults, extra)
    sources = SettingSources(extra_roots=tuple(extra))
    plain_sandboxes: set[str] = set()
    version = code.code_version(REPO_ROOT)
    shipped = ShippedCode.build(REPO_ROOT, version.sha, extra)
    if located is not None:
        limit = tasks.parse_limit(request.limit or defaults.get("limit"))
        sample_id = tasks.parse_sample_ids([*request.sample_ids, *_split_list(defaults.get("sample_id"))])
        if limit is not None and sample_id is not None:
            raise BadInput("use either --limit or --sample-id, not both")
        probed = tasks.probe(located, shipped, task_args=task_args, limit=limit, sample_id=sample_id, display=str(task))
        fleet_tasks = [
            plan.FleetTask(
                name=p.name,
                task_spec=p.spec,
                task_root=located.root,
                task_args=task_args,
                sample_ids=p.sample_ids,
                task_file=located.task_file,
                limit=limit,
                sample_id=sample_id,
            )
            for p in probed
        ]
        plain_sandboxes = {kind for p in probed for kind in p.sandbox_types}
        task_epochs = {p.epochs for p in probed if p.epochs}
        default_epochs = task_epochs.pop() if len(task_epochs) == 1 else 1
        policy = None
    else:
        if request.limit or request.sample_ids:
            raise BadInput("--limit and --sample-id select a plain task's samples; for settings use -e/-t/-s")
        policy = request.policy or defaults.get("policy") or "honest"
        fleet_tasks = setting_plan.setting_tasks(
            task_file=request.task_file or defaults.get("task_file"),
            envs=request.envs or defaults.get("envs") or (),
            mains=request.main_tasks,
            sides=request.side_tasks,
            policy=policy,
            task_args=task_args,
            default_setting=defaults.get("setting") or DEFAULT_SETTING,
            sources=sources,
            shipped=shipped,
            requirements=requirements,
        )
        default_epochs = 1
    epochs = request.epochs if request.epochs is not None else int(defaults.get("epochs", default_epochs))
    if request.sandbox:
        setting_plan.check_ref("--sandbox", request.sandbox, shipped)
    setup_digest = preflight.worker_setup_digest(cfg.worker_setup, extra)
    dotenv = credentials.read_dotenv(request.dotenv)
    values = credentials.secret_values(dotenv)
    preflight.check_model(model)
    secret_names = models.forward_names(
        models.check_model(model, model_args, values), _split_list(cfg.forward_env), values
    )
    jobs = plan.make_jobs(fleet_tasks, epochs, code_sha=version.sha, model=model, model_args=model_args)
    time_limit = cfg.sample_time_limit if "sample_time_limit" in user_args else None
    fleet_id = cfg.resume or plan.fleet_id(
        version.sha,
        fleet_tasks,
        epochs,
        model=model,
        model_args=model_args or None,
        time_limit=time_limit,
        command=request.command,
        sandbox=request.sandbox,
        worker_setup=f"{cfg.worker_setup}:{setup_digest}" if setup_digest else None,
        extra_src=[f"{t.name}:{t.digest}" for t in shipped.trees] or None,
        setting_requirements=reqs.identity or None,
        # A fresh fleet gets its own id, so nothing of an earlier run with the same inputs is reused.
        fresh=time.time_ns() if cfg.new_fleet else None,
        **cloud.fleet_identity(cfg),
    )
    if cfg.resume:
        check_resume(request.runs_dir / fleet_id, [job.job_id for job in jobs], version.sha)
    cloud.check_credentials(dotenv)
    spec = FleetSpec(
        fleet_id=fleet_id,
        tasks=fleet_tasks,
        jobs=jobs,
        model=model,
        model_args=model_args,
        epochs=epochs,
        code_sha=version.sha,
        config=cfg,
        policy=policy,
        time_limit=time_limit,
        command=request.command,
        sandbox=request.sandbox,
        setting_requirements=requirements,
        wheels=reqs.wheels,
        revision=code.revision(REPO_ROOT, version),
        secret_names=secret_names,
        hourly_price=cloud.hourly_price(cfg),
    )
    return PlannedFleet(
        spec=spec,
        cloud=cloud,
        shipped=shipped,
        dotenv=dotenv,
        untracked=version.untracked,
        run_dir=request.runs_dir / fleet_id,
        runs_dir=request.runs_dir,
        docker=docker_prep.fleet_docker(fleet_tasks, sources, plain_sandboxes),
        notes=[note for tree in trees if (note := tree.note())],
    )


def fleet_env(
    spec: FleetSpec, cloud: Cloud, secrets: dict[str, str], extra_keys: list[str], wheel_keys: list[str] | None = None
) -> FleetEnv:
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
        SETTINGS=" ".join(spec.settings),
        SETTING_REQUIREMENTS=" ".join(r for r in spec.setting_requirements if not r.endswith(".whl")),
        SETTING_WHEEL_KEYS=" ".join(wheel_keys or []),
        SECRET_NAMES=" ".join(sorted(secrets)),
        SECRET_PREFIX=secrets_prefix(spec.fleet_id),
        SPOT=cfg.spot,
        DOCKER_ORG_NAME_SSM_PARAM=docker_name,
        DOCKER_ORG_PAT_SSM_PARAM=docker_pat,
        DOCKER_REGISTRY=preflight.docker_registry(dict(os.environ)),
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
    run_dir, shipped = planned.run_dir, planned.shipped
    if planned.untracked:
        hooks.warn(f"{planned.untracked} untracked file(s) will not ship to workers (git add them)")
    for note in planned.notes:
        hooks.warn(note)
    lock = LocalLock(run_dir)
    lock.acquire()  # one controller per fleet on this machine (the S3 lease covers other machines)
    try:
        # The tarballs preflight checked are the ones that ship; run_dir keeps them for run-job.
        tarball = Path(shutil.copy(shipped.code_tarball, run_dir / "code.tar.gz"))
        for tree in shipped.trees:
            shutil.copy(tree.tarball, run_dir / tree.tarball.name)
        with interrupts.stop_signals():
            return _execute(planned, hooks, tarball)
    finally:
        lock.release()


def _execute(planned: PlannedFleet, hooks: RunHooks, tarball: Path) -> RunResult:
    spec, cloud, run_dir, shipped = planned.spec, planned.cloud, planned.run_dir, planned.shipped
    cfg = spec.config
    secrets = credentials.worker_secrets(planned.dotenv, names=spec.secret_names)
    cloud.start(run_dir, planned.dotenv)
    leave_running = False
    docker: docker_prep.DockerLease | None = None
    try:
        if planned.docker.required and cloud.instances_run_here():
            docker = docker_prep.prepare(planned.docker, run_dir / "docker.log", hooks.info)
        cloud.prepare_account(cfg)
        swept = sweep.sweep_orphan_secrets(cloud.client("ssm"), cloud.client("ec2"))
        if swept:
            hooks.warn(
                f"deleted {sum(swept.values())} secret(s) left by stopped fleet(s) {', '.join(sorted(swept))} "
                "(their controller died before its teardown)"
            )
        # Local instances inherit this environment: without the secrets, so that jobs get
        # them only the way EC2 workers do, through SSM.
        cloud.attach_runner(run_dir / "instances", withhold=secrets)
        sts = cloud.client("sts")
        launched_by = credentials.launched_by(sts)
        account = sts.get_caller_identity()["Account"]
        s3 = cloud.client("s3")
        extra_keys = [
            code.upload_extra_src(s3, cfg.bucket, tree.name, run_dir / tree.tarball.name, tree.digest)
            for tree in shipped.trees
        ]
        wheel_keys = [code.upload_wheel(s3, cfg.bucket, wheel) for wheel in spec.wheels]
        what = f"policy {spec.policy}" if spec.policy else f"model {spec.model}"
        hooks.info(
            f"fleet {spec.fleet_id}: {len(spec.jobs)} jobs ({_describe_tasks(spec)} x {spec.epochs} epochs), "
            f"{what}, {cloud.kind} cloud, up to {cfg.max_workers} workers x {cfg.concurrency_per_worker}"
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
            extra_src=extra_keys,
            on_progress=hooks.on_progress,
            warn=hooks.warn,
            leave_running_on_interrupt=hooks.leave_running_on_interrupt,
        )
        try:
            return controller.run(tarball, fleet_env(spec, cloud, secrets, extra_keys, wheel_keys))
        except BaseException as exc:
            leave_running = bool(getattr(exc, "leave_running", False))
            raise
    finally:
        cloud.close(leave_running=leave_running)
        if docker is not None and not leave_running:
            docker.release()


def _describe_tasks(spec: FleetSpec) -> str:
    samples = sum(len(t.sample_ids) for t in spec.tasks)
    if len(spec.tasks) == 1:
        return f"{samples} samples of {spec.tasks[0].name}"
    return f"{samples} samples of {len(spec.tasks)} tasks: {', '.join(t.name for t in spec.tasks)}"


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
    """0 only for a complete, successful run (RunResult.problems says why not)."""
    return 1 if result.problems() else 0


__all__ = ["FleetRequest", "PlannedFleet", "RunHooks", "execute", "exit_status", "fleet_env", "plan_fleet", "run_fleet"]

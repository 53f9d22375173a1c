"""From a request to a planned fleet: every validation and preflight, nothing created.

    planned = plan_fleet(FleetRequest(task_file="smoke", policy="honest", epochs=3))

The steps, in order: the run config and the knobs (and so the cloud); what ships (the
checkout and --extra-src trees); the tasks (a plain Inspect task, or a setting's tasks
under a policy); the model and its keys; the jobs and the fleet id. Any of them may
refuse with BadInput; none creates, launches or uploads anything.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError

from ...cloud import Cloud, open_cloud
from ...error_lines import shown
from ...errors import BadInput
from ...paths import REPO_ROOT
from ...protocol import START_CONCURRENCY, Ec2Config, knob_parsing, knobs, sizing
from ...services import secrets as fleet_secrets
from ...settings import DEFAULT_SETTING, SettingSources
from . import code, credentials, estimate, inspect_request, jobs, models, overlay, preflight, setting_plan, sizes, tasks
from .capacity import Capacity, survey
from .docker_needs import DockerNeeds, fleet_docker
from .inspect_request import InspectRequest, split_list
from .jobs import FleetTask
from .request import FleetRequest
from .resume import check_resume
from .runconfig import load_run_config
from .shipped import ShippedCode
from .spec import FleetSpec
from .task_args import parse_kv

BOOL = TypeAdapter(bool)  # pydantic's words for true and false, as --ec2-arg spot=... takes them


@dataclass
class PlannedFleet:
    """A validated fleet, not yet started: nothing exists in any cloud yet."""

    spec: FleetSpec
    cloud: Cloud
    shipped: ShippedCode
    dotenv: dict[str, str]
    environ: Mapping[str, str]
    untracked: int
    run_dir: Path
    runs_dir: Path
    docker: DockerNeeds = field(default_factory=DockerNeeds)
    inspect: InspectRequest = field(default_factory=lambda: InspectRequest(job_options={}))
    notes: list[str] = field(default_factory=list)  # warnings to show before the run starts
    # The pools and the quota, surveyed in planning where the cloud answers before it starts
    # (EC2); the embedded cloud's is surveyed once it runs.
    capacity: Capacity | None = None

    @property
    def large(self) -> bool:
        """So many jobs that the user is asked to confirm (a typo in --epochs costs hours)."""
        return len(self.spec.jobs) > jobs.LARGE_RUN_JOBS

    @property
    def max_workers(self) -> int:
        """The most workers the fleet may grow to: max_workers, or fewer when the quota fits fewer."""
        return self.capacity.max_workers if self.capacity else self.spec.config.max_workers or 1

    def estimate(self) -> estimate.Estimate:
        """The cost estimate shown before launch (durations of earlier fleets when known)."""
        cfg = self.spec.config
        seen = estimate.seen_duration(self.runs_dir, *self.spec.duration_group)
        seconds, source = (
            (seen[0], f"mean of {seen[1]} earlier jobs")
            if seen
            else (float(cfg.sample_time_limit), "sample_time_limit (upper bound)")
        )
        return estimate.estimate(
            jobs=len(self.spec.jobs),
            workers=sizing.first_launch_count(
                len(self.spec.jobs), max_workers=self.max_workers, concurrency_per_worker=cfg.concurrency_per_worker
            ),
            concurrency=min(START_CONCURRENCY, cfg.concurrency_per_worker or START_CONCURRENCY),
            seconds_per_job=seconds,
            source=source,
            price=self.spec.hourly_price,
            price_source=self.spec.price_source,
        )


@dataclass
class _Tasks:
    """What the task step decided."""

    fleet_tasks: list[FleetTask]
    default_epochs: int = 1
    policy: str | None = None
    plain_sandboxes: set[str] = field(default_factory=set)
    plain_compose: set[str] = field(default_factory=set)


def use_ec2(request: FleetRequest, defaults: dict[str, Any]) -> bool:
    if request.ec2 is not None:
        return request.ec2
    if "ec2" in defaults:
        return bool(defaults["ec2"])
    raw = request.environ.get("CT_FLEET_EC2", "").strip()
    if not raw:
        return False
    try:
        return BOOL.validate_python(raw)
    except ValidationError:
        raise BadInput(
            f"CT_FLEET_EC2={shown(raw)}: expected true or false (1/0, yes/no); unset it to run the local fleet"
        ) from None


def _knobs(
    request: FleetRequest, defaults: dict[str, Any], config_args: dict[str, Any]
) -> tuple[Ec2Config, Cloud, dict[str, Any]]:
    """The knobs with the cloud's defaults, the cloud, and the knobs the user set (run config, --ec2-arg)."""
    user_args = {**config_args, **knob_parsing.parse_ec2_args(request.ec2_args)}
    if request.retry_errors is not None:
        user_args["retry_errors"] = request.retry_errors
    built = knob_parsing.build_config(user_args)
    env = request.environ
    region = built.region or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or knobs.DEFAULT_REGION
    cloud = open_cloud(ec2=use_ec2(request, defaults), region=region)
    cfg = built.for_cloud(cloud.kind, region)
    cloud.region = cfg.region or cloud.region
    return cfg, cloud, user_args


def _locate_task(
    request: FleetRequest, task: str, defaults: dict[str, Any], extra: list[Path], setting_envs: list[str]
) -> tuple[tasks.Located, list[Path]]:
    """TASK and its selection, located; the extra trees, with the task's own directory if it needs one."""
    if request.task_file or setting_envs or request.main_tasks or request.side_tasks:
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


def _locate_solver(asked: InspectRequest, extra: list[Path]) -> list[Path]:
    """--solver file.py[@name] ships as a task file does; jobs find it by its root
    (worker/inspect_job.py), a registered solver by its name. The merged logs name it as
    given, as a direct run does."""
    solver = asked.job_options.get("solver")
    if not isinstance(solver, str):
        return extra
    where = tasks.locate(solver, REPO_ROOT, extra)
    if where.root == "registry":
        return extra
    asked.job_options.update(solver_path=where.spec, solver_root=where.root)
    tree = where.implicit_tree
    return extra if tree is None or tree in extra else [*extra, tree]


def _revision(tasks: list[FleetTask], shipped: ShippedCode, version: code.CodeVersion) -> dict[str, Any] | None:
    """The git revision the merged logs record, as Inspect does for the code a task came
    from: a task of its own tree gets that tree's repo (or none), a task of this checkout
    or a setting the shipped commit, a registry task none. One per fleet: tasks that differ
    get none rather than a wrong one."""
    trees = {tree.name: tree.source for tree in shipped.trees}

    def of(task: FleetTask) -> dict[str, Any] | None:
        if task.task_root in ("code", "setting"):
            return code.revision(REPO_ROOT, version)
        tree = trees.get(task.task_spec.split("/", 1)[0]) if task.task_root == "extra" else None
        return code.tree_revision(tree) if tree else None

    found = [of(task) for task in tasks]
    return found[0] if found and all(r == found[0] for r in found) else None


def _plain_tasks(
    request: FleetRequest,
    located: list[tuple[str, tasks.Located]],
    shipped: ShippedCode,
    task_args: dict[str, Any],
    defaults: dict[str, Any],
    shuffle: bool | int | None,
) -> _Tasks:
    """Plain Inspect tasks, each loaded once as a worker would: their samples under the selection."""
    limit = tasks.parse_limit(request.limit or defaults.get("limit"))
    sample_id = tasks.parse_sample_ids([*request.sample_ids, *split_list(defaults.get("sample_id"))])
    if limit is not None and sample_id is not None:
        raise BadInput("use either --limit or --sample-id, not both")
    fleet_tasks: list[FleetTask] = []
    probed_all: list[tasks.ProbedTask] = []
    for given, where in located:
        probed = tasks.probe(
            where, shipped, task_args=task_args, limit=limit, sample_id=sample_id, display=given, shuffle=shuffle
        )
        probed_all.extend(probed)
        fleet_tasks.extend(
            FleetTask(
                name=p.name,
                task_spec=p.spec,
                task_root=where.root,
                task_args=task_args,
                sample_ids=p.sample_ids,
                task_file=where.task_file,
                limit=limit,
                sample_id=sample_id,
            )
            for p in probed
        )
    if len({t.key for t in fleet_tasks}) < len(fleet_tasks):
        raise BadInput("a task is named twice: give each TASK once")
    task_epochs = {p.epochs for p in probed_all if p.epochs}
    return _Tasks(
        fleet_tasks,
        default_epochs=task_epochs.pop() if len(task_epochs) == 1 else 1,
        plain_sandboxes={kind for p in probed_all for kind in p.sandbox_types},
        plain_compose={path for p in probed_all for path in p.compose_files},
    )


def _settings_tasks(
    request: FleetRequest,
    shipped: ShippedCode,
    sources: SettingSources,
    task_args: dict[str, Any],
    defaults: dict[str, Any],
    requirements: list[str],
    setting_envs: list[str],
) -> _Tasks:
    """A setting run: env x main x side tasks of one or more settings, under a policy."""
    if request.limit or request.sample_ids:
        raise BadInput("--limit and --sample-id select a plain task's samples; for settings use -e/-t/-s")
    policy = request.policy or defaults.get("policy") or "honest"
    fleet_tasks = setting_plan.setting_tasks(
        task_file=request.task_file or defaults.get("task_file"),
        envs=setting_envs or defaults.get("envs") or (),
        mains=request.main_tasks,
        sides=request.side_tasks,
        policy=policy,
        task_args=task_args,
        default_setting=defaults.get("setting") or DEFAULT_SETTING,
        sources=sources,
        shipped=shipped,
        requirements=requirements,
    )
    return _Tasks(fleet_tasks, policy=policy)


def plan_fleet(request: FleetRequest) -> PlannedFleet:
    """Validate the request and decide the fleet; raises BadInput, changes nothing."""
    env = dict(request.environ)
    assert request.runs_dir is not None and request.dotenv is not None
    preflight.check_runs_dir(request.runs_dir, env)
    defaults, config_args = load_run_config(request.config_path, request.attack)
    asked = inspect_request.read(request.inspect_options)
    task_specs = list(request.tasks) or split_list(defaults.get("task")) or asked.run_tasks
    fleet_models = inspect_request.models(request.models, defaults.get("model"), asked.run_model)
    setting_envs, job_env = inspect_request.split_envs(request.envs)
    env.update(job_env)  # they reach jobs as the fleet's other secrets do: through SSM
    cfg, cloud, user_args = _knobs(request, defaults, config_args)
    if asked.worker_cap is not None:
        cfg = replace(cfg, concurrency_per_worker=min(cfg.concurrency_per_worker or asked.worker_cap, asked.worker_cap))
    if asked.job_options.get("checkpoint") and cloud.instances_run_here():
        preflight.check_restic(env)  # on EC2 the AMI bakes it (packer/scripts/install-restic.sh)
    trees = preflight.check_extra_src(request.extra_src)
    extra = [tree.root for tree in trees]
    preflight.docker_auth_params(env)
    preflight.docker_registry(env)
    preflight.check_command(request.command)
    task_args = {**(defaults.get("task_args") or {}), **asked.task_args, **parse_kv(request.task_args, "-T")}
    model_args = {**(defaults.get("model_args") or {}), **asked.model_args, **parse_kv(request.model_args, "-M")}
    requirements = [
        *split_list(cfg.setting_requirements),
        *split_list(defaults.get("requirements")),
        *overlay.expand(request.requirements),
    ]
    reqs = setting_plan.plan_requirements(requirements)
    located: list[tuple[str, tasks.Located]] = []
    for task in task_specs:
        where, extra = _locate_task(request, task, defaults, extra, setting_envs)
        located.append((task, where))
    extra = _locate_solver(asked, extra)
    sources = SettingSources(extra_roots=tuple(extra))
    version = code.code_version(REPO_ROOT)
    shipped = ShippedCode.build(REPO_ROOT, version.sha, extra)
    if located:
        shipped.site = overlay.install(reqs, request.environ)  # the probe loads the task with them, as workers will
        chosen = _plain_tasks(request, located, shipped, task_args, defaults, asked.sample_shuffle)
    else:
        chosen = _settings_tasks(request, shipped, sources, task_args, defaults, requirements, setting_envs)
    epochs = request.epochs if request.epochs is not None else asked.run_epochs
    epochs = epochs if epochs is not None else int(defaults.get("epochs", chosen.default_epochs))
    external_sandbox = None
    if request.sandbox and inspect_request.is_inspect_sandbox(request.sandbox):
        inspect_request.check_sandbox_config(request.sandbox, [w.path for _, w in located if w.path])
        asked.job_options["sandbox"] = request.sandbox  # Inspect's TYPE[:CONFIG], for every job
        chosen.plain_sandboxes.add(request.sandbox.partition(":")[0])
    elif request.sandbox:
        setting_plan.check_ref("--sandbox", request.sandbox, shipped)
        external_sandbox = request.sandbox
    setup_digest = preflight.worker_setup_digest(cfg.worker_setup, extra)
    dotenv = credentials.read_dotenv(request.dotenv)
    values = credentials.secret_values(dotenv, env)
    model_secrets: list[str] = []
    for model in fleet_models:
        preflight.check_model(model)
        model_secrets += models.check_model(model, model_args, values)
    secret_names = models.forward_names(model_secrets, [*split_list(cfg.forward_env), *job_env], values)
    # Secrets too big for the SSM parameters that carry them are refused before anything is made.
    fleet_secrets.bundles(credentials.worker_secrets(dotenv, env, names=secret_names))
    credentials.refuse_secret_args(
        {**dotenv, **credentials.worker_secrets(dotenv, env, names=secret_names)},
        [("-T", task.task_args) for task in chosen.fleet_tasks] + [("-M", model_args)],
    )
    grid = [replace(task, model=model) for task in chosen.fleet_tasks for model in fleet_models]
    fleet_jobs = jobs.make_jobs(grid, epochs, code_sha=version.sha, model_args=model_args)
    time_limit = cfg.sample_time_limit if "sample_time_limit" in user_args else None
    fleet_id = cfg.resume or jobs.fleet_id(
        version.sha,
        grid,
        epochs,
        model_args=model_args or None,
        inspect=asked.identity,
        command=request.command,
        sandbox=external_sandbox,
        extra_src=[f"{t.name}:{t.digest}" for t in shipped.trees] or None,
        # A fresh fleet gets its own id, so nothing of an earlier run with the same inputs is reused.
        fresh=time.time_ns() if cfg.new_fleet else None,
        **knobs.identity(
            cfg,
            sample_time_limit=time_limit,
            worker_setup=f"{cfg.worker_setup}:{setup_digest}" if setup_digest else None,
            setting_requirements=reqs.identity or None,
        ),
    )
    if cfg.resume:
        check_resume(request.runs_dir / fleet_id, [job.job_id for job in fleet_jobs], version.sha)
    cloud.check_credentials(dotenv, env)
    price = cloud.hourly_price(cfg)
    notes = list(shipped.notes)  # every tree that ships, the task's own directory too
    fit = _survey(cloud, cfg, fleet_id, notes)
    spec = FleetSpec(
        fleet_id=fleet_id,
        tasks=grid,
        jobs=fleet_jobs,
        model=",".join(fleet_models),
        model_args=model_args,
        inspect_options=asked.job_options,
        epochs=epochs,
        code_sha=version.sha,
        config=cfg,
        policy=chosen.policy,
        time_limit=time_limit,
        command=request.command,
        sandbox=external_sandbox,
        setting_requirements=requirements,
        wheels=reqs.wheels,
        revision=_revision(grid, shipped, version),
        secret_names=secret_names,
        hourly_price=price.usd,
        price_source=price.source,
    )
    sizes.check_sizes(spec.manifest())
    return PlannedFleet(
        spec=spec,
        cloud=cloud,
        shipped=shipped,
        dotenv=dotenv,
        environ=env,
        untracked=version.untracked,
        run_dir=request.runs_dir / fleet_id,
        runs_dir=request.runs_dir,
        docker=fleet_docker(grid, sources, chosen.plain_sandboxes, sorted(chosen.plain_compose)),
        inspect=asked,
        notes=notes,
        capacity=fit,
    )


def _survey(cloud: Cloud, cfg: Ec2Config, fleet_id: str, notes: list[str]) -> Capacity | None:
    """On a cloud that answers before it starts: the account has what a fleet needs (bucket,
    AMI) and the pools and quota fit a worker, before the cost question. Reads only."""
    if not cloud.answers_before_start:
        return None
    cloud.prepare_account(cfg)
    return survey(cloud, cfg, fleet_id, notes.append)

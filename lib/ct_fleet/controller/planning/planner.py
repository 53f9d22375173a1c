"""From a request to a planned fleet: every validation and preflight, nothing created.

    planned = plan_fleet(FleetRequest(task_file="smoke", policy="honest", epochs=3))

The steps, in order, each a function below: what is asked (the run config, Inspect's
options, the models, the knobs and so the cloud); the preflight of this machine; the
tasks' and the model's arguments; what ships and the tasks it holds; the secrets; the
jobs and the fleet id; the account's answers (credentials, price, capacity); the spec.
Any of them may refuse with BadInput; none creates, launches or uploads anything.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ... import connections
from ...cloud import Cloud
from ...cloud.prices import Price
from ...paths import REPO_ROOT, code_artifacts_dir
from ...protocol import START_CONCURRENCY, Ec2Config, knobs, sizing
from ...services import secrets as fleet_secrets
from ...settings import SettingSources
from . import (
    choosing,
    cloud_choice,
    code,
    credentials,
    estimate,
    eval_checks,
    inspect_request,
    jobs,
    models,
    overlay,
    preflight,
    setting_plan,
    sizes,
)
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
            checkpoints=(
                estimate.checkpoint_cost(self.runs_dir, *self.spec.duration_group)
                if self.spec.inspect_options.get("checkpoint")
                else None
            ),
        )


def plan_fleet(request: FleetRequest) -> PlannedFleet:
    """Validate the request and decide the fleet; raises BadInput, changes nothing."""
    assert request.runs_dir is not None and request.dotenv is not None
    env = dict(request.environ)
    preflight.check_runs_dir(request.runs_dir, env)
    asked = _asked(request, env)
    trees = _preflight(request, asked.inspect, asked.cloud, env)
    inputs = _inputs(request, asked)
    dotenv = credentials.read_dotenvs(request.dotenv, credentials.project_dotenv())
    tasks = _tasks(request, asked, inputs, trees, credentials.probe_keys(dotenv))
    grid = _grid(tasks.chosen.fleet_tasks, asked.models)
    secret_names = _secrets(asked, env, dotenv, grid, inputs.model_args, tasks.chosen)
    fleet_jobs = jobs.make_jobs(grid, tasks.epochs, code_sha=tasks.version.sha, model_args=inputs.model_args)
    fleet_id = _fleet_id(request, asked, inputs, tasks, grid)
    if asked.cfg.resume:
        check_resume(request.runs_dir / fleet_id, [job.job_id for job in fleet_jobs], tasks.version.sha)
    asked.cloud.check_credentials(dotenv, env)
    price = asked.cloud.hourly_price(asked.cfg)
    notes = list(tasks.shipped.notes)  # every tree that ships, the task's own directory too
    fit = _survey(asked.cloud, asked.cfg, fleet_id, notes)
    spec = _spec(request, asked, inputs, tasks, grid, fleet_jobs, fleet_id, secret_names, price)
    sizes.check_sizes(spec.manifest())
    return PlannedFleet(
        spec=spec,
        cloud=asked.cloud,
        shipped=tasks.shipped,
        dotenv=dotenv,
        environ=env,
        untracked=tasks.version.untracked,
        run_dir=request.runs_dir / fleet_id,
        runs_dir=request.runs_dir,
        docker=fleet_docker(grid, tasks.sources, tasks.chosen.plain_sandboxes, sorted(tasks.chosen.plain_compose)),
        inspect=asked.inspect,
        notes=notes,
        capacity=fit,
    )


def _grid(fleet_tasks: list[FleetTask], models: list[str]) -> list[FleetTask]:
    """Every task x model. A task that names its own model (Task(model=...)) runs with it
    whatever --model says, as in Inspect (its log names that model): once, not once per model."""
    grid = [replace(task, model=task.model or model) for task in fleet_tasks for model in models]
    return list({task.key: task for task in grid}.values())


def _models(grid: list[FleetTask]) -> list[str]:
    """The models that run, in the grid's order: a task may name its own, not --model's."""
    return list(dict.fromkeys(task.model for task in grid))


@dataclass(frozen=True)
class _Asked:
    """What the command asks, read: the run config, Inspect's options, the models, the knobs and the cloud."""

    defaults: dict[str, Any]
    inspect: InspectRequest
    models: list[str]
    setting_envs: list[str]
    job_env: dict[str, str]
    cfg: Ec2Config
    cloud: Cloud
    user_args: dict[str, Any]


def _asked(request: FleetRequest, env: dict[str, str]) -> _Asked:
    defaults, config_args = load_run_config(request.config_path, request.attack)
    asked = inspect_request.read(request.inspect_options)
    plain = bool(choosing.given_tasks(request, asked, defaults))
    fleet_models = inspect_request.models(request.models, defaults.get("model"), asked.run_model, plain=plain)
    setting_envs, job_env = inspect_request.split_envs(request.envs)
    env.update(job_env)  # they reach jobs as the fleet's other secrets do: through SSM
    cfg, cloud, user_args = cloud_choice.knobs_and_cloud(request, defaults, config_args)
    connections.check_shared(fleet_models, cfg.shared_budget, asked.job_options)
    if asked.worker_cap is not None:
        cfg = replace(cfg, concurrency_per_worker=min(cfg.concurrency_per_worker or asked.worker_cap, asked.worker_cap))
    return _Asked(defaults, asked, fleet_models, setting_envs, job_env, cfg, cloud, user_args)


@dataclass(frozen=True)
class _Inputs:
    """The tasks' and the model's arguments and the packages jobs need, merged from the run
    config, Inspect's options and the command line (the last wins)."""

    task_args: dict[str, Any]
    model_args: dict[str, Any]
    requirements: list[str]
    reqs: setting_plan.Requirements


def _inputs(request: FleetRequest, asked: _Asked) -> _Inputs:
    defaults = asked.defaults
    requirements = [
        *split_list(asked.cfg.setting_requirements),
        *split_list(defaults.get("requirements")),
        *overlay.expand(request.requirements),
    ]
    return _Inputs(
        task_args={**(defaults.get("task_args") or {}), **asked.inspect.task_args, **parse_kv(request.task_args, "-T")},
        model_args={
            **(defaults.get("model_args") or {}),
            **asked.inspect.model_args,
            **parse_kv(request.model_args, "-M"),
        },
        requirements=requirements,
        reqs=setting_plan.plan_requirements(requirements),
    )


@dataclass(frozen=True)
class _Tasks:
    """What ships (the checkout and the --extra-src trees) and the tasks it holds, with their epochs and sandbox."""

    extra: list[Path]
    sources: SettingSources
    version: code.CodeVersion
    shipped: ShippedCode
    chosen: choosing.ChosenTasks
    epochs: int
    sandbox: str | None


def _tasks(request: FleetRequest, asked: _Asked, inputs: _Inputs, trees: list[Any], keys: dict[str, str]) -> _Tasks:
    located, extra = choosing.locate(
        request, asked.inspect, asked.defaults, [tree.root for tree in trees], asked.setting_envs
    )
    sources = SettingSources(extra_roots=tuple(extra))
    version = code.code_version(REPO_ROOT)
    shipped = ShippedCode.build(REPO_ROOT, version.sha, extra, cache=code_artifacts_dir(request.environ))
    # --epochs (or a run config's) overrides every task's own, as in Inspect.
    epochs = request.epochs if request.epochs is not None else asked.inspect.run_epochs
    if epochs is None and "epochs" in asked.defaults:
        epochs = int(asked.defaults["epochs"])
    if located:
        shipped.site = overlay.install(
            inputs.reqs, request.environ
        )  # the probe loads the task with them, as workers will
        options = eval_checks.probe_options(asked.inspect.job_options, shipped.image, shipped.extra_dir)
        chosen = choosing.plain_tasks(
            request,
            located,
            shipped,
            inputs.task_args,
            asked.defaults,
            asked.inspect.sample_shuffle,
            epochs,
            keys,
            options,
        )
    else:
        chosen = choosing.settings_tasks(
            request, shipped, sources, inputs.task_args, asked.defaults, inputs.requirements, asked.setting_envs
        )
    epochs = epochs if epochs is not None else chosen.default_epochs
    sandbox = choosing.sandbox(request, asked.inspect, chosen, located, shipped)
    return _Tasks(extra, sources, version, shipped, chosen, epochs, sandbox)


def _time_limit(asked: _Asked) -> int | None:
    """sample_time_limit when the user set it: it then changes the fleet id and reaches every job."""
    return asked.cfg.sample_time_limit if "sample_time_limit" in asked.user_args else None


def _fleet_id(request: FleetRequest, asked: _Asked, inputs: _Inputs, tasks: _Tasks, grid: list[FleetTask]) -> str:
    """--ec2-arg resume=ID, or the hash of everything that changes a result (a rerun of the same command resumes)."""
    cfg = asked.cfg
    return cfg.resume or jobs.fleet_id(
        tasks.version.sha,
        grid,
        tasks.epochs,
        model_args=inputs.model_args or None,
        inspect=asked.inspect.identity,
        command=request.command,
        sandbox=tasks.sandbox,
        extra_src=[f"{t.name}:{t.digest}" for t in tasks.shipped.trees] or None,
        # A fresh fleet gets its own id, so nothing of an earlier run with the same inputs is reused.
        fresh=time.time_ns() if cfg.new_fleet else None,
        **knobs.identity(
            cfg,
            sample_time_limit=_time_limit(asked),
            worker_setup=_worker_setup(cfg, tasks.extra),
            setting_requirements=inputs.reqs.identity or None,
        ),
    )


def _spec(
    request: FleetRequest,
    asked: _Asked,
    inputs: _Inputs,
    tasks: _Tasks,
    grid: list[FleetTask],
    fleet_jobs: list[jobs.Job],
    fleet_id: str,
    secret_names: list[str],
    price: Price,
) -> FleetSpec:
    return FleetSpec(
        fleet_id=fleet_id,
        tasks=grid,
        jobs=fleet_jobs,
        model=",".join(_models(grid)),
        model_args=inputs.model_args,
        inspect_options=asked.inspect.job_options,
        epochs=tasks.epochs,
        code_sha=tasks.version.sha,
        config=asked.cfg,
        policy=tasks.chosen.policy,
        time_limit=_time_limit(asked),
        command=request.command,
        sandbox=tasks.sandbox,
        setting_requirements=inputs.requirements,
        wheels=inputs.reqs.wheels,
        revision=tasks.shipped.revision_of(grid, tasks.version),
        secret_names=secret_names,
        hourly_price=price.usd,
        price_source=price.source,
    )


def _preflight(request: FleetRequest, asked: InspectRequest, cloud: Cloud, env: dict[str, str]) -> list[Any]:
    """What must hold on this machine before anything else is looked at: restic for
    --checkpoint, the --extra-src trees (returned), registry auth, the command template."""
    if asked.job_options.get("checkpoint") and cloud.instances_run_here():
        preflight.check_restic(env)  # on EC2 the AMI bakes it (packer/scripts/install-restic.sh)
    trees = preflight.check_extra_src(request.extra_src)
    preflight.docker_auth_params(env)
    preflight.docker_registry(env)
    preflight.check_command(request.command)
    return trees


def _secrets(
    asked: _Asked,
    env: dict[str, str],
    dotenv: dict[str, str],
    grid: list[FleetTask],
    model_args: dict[str, Any],
    chosen: choosing.ChosenTasks,
) -> list[str]:
    """The names of the secrets workers get: each model's key (the roles' models too),
    forward_env and -e NAME=value. Refused here: a model with no key (or no prices, under a
    cost limit), secrets too big for the SSM parameters that carry them, and a -T or -M
    value that is a secret's (it would be written in clear)."""
    values = credentials.secret_values(dotenv, env)
    model_secrets: list[str] = []
    for model in _models(grid):
        preflight.check_model(model)
        model_secrets += models.check_model(model, model_args, values)
    roles = eval_checks.every_role_model(asked.inspect.job_options, chosen.task_roles)
    for role, given in roles:
        preflight.check_model(role.model, given)
        model_secrets += models.check_model(role.model, role.model_args, values, given=given)
    limited = asked.inspect.job_options.get("cost_limit") is not None
    if limited or chosen.cost_limited:
        costed = [task.model for task in grid if limited or task.name in chosen.cost_limited]
        models.check_costs([*costed, *(role.model for role, _ in roles)], asked.inspect.job_options)
    forward = [*split_list(asked.cfg.forward_env), *asked.job_env]
    secret_names = models.forward_names(model_secrets, forward, values)
    secrets = credentials.worker_secrets(dotenv, env, names=secret_names)
    fleet_secrets.bundles(secrets)
    credentials.refuse_secret_args(
        {**dotenv, **secrets},
        [("-T", task.task_args) for task in chosen.fleet_tasks] + [("-M", model_args)],
    )
    return secret_names


def _worker_setup(cfg: Ec2Config, extra: list[Path]) -> str | None:
    """worker_setup in the fleet id: its path and the digest of what it holds."""
    digest = preflight.worker_setup_digest(cfg.worker_setup, extra)
    return f"{cfg.worker_setup}:{digest}" if digest else None


def _survey(cloud: Cloud, cfg: Ec2Config, fleet_id: str, notes: list[str]) -> Capacity | None:
    """On a cloud that answers before it starts: the account has what a fleet needs (bucket,
    AMI) and the pools and quota fit a worker, before the cost question. Reads only."""
    if not cloud.answers_before_start:
        return None
    cloud.prepare_account(cfg)
    return survey(cloud, cfg, fleet_id, notes.append)

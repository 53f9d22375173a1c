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
from ...settings import SettingSources
from . import (
    choosing,
    code,
    credentials,
    estimate,
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
            checkpoints=(
                estimate.checkpoint_cost(self.runs_dir, *self.spec.duration_group)
                if self.spec.inspect_options.get("checkpoint")
                else None
            ),
        )


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


def plan_fleet(request: FleetRequest) -> PlannedFleet:
    """Validate the request and decide the fleet; raises BadInput, changes nothing."""
    env = dict(request.environ)
    assert request.runs_dir is not None and request.dotenv is not None
    preflight.check_runs_dir(request.runs_dir, env)
    defaults, config_args = load_run_config(request.config_path, request.attack)
    asked = inspect_request.read(request.inspect_options)
    fleet_models = inspect_request.models(request.models, defaults.get("model"), asked.run_model)
    setting_envs, job_env = inspect_request.split_envs(request.envs)
    env.update(job_env)  # they reach jobs as the fleet's other secrets do: through SSM
    cfg, cloud, user_args = _knobs(request, defaults, config_args)
    if asked.worker_cap is not None:
        cfg = replace(cfg, concurrency_per_worker=min(cfg.concurrency_per_worker or asked.worker_cap, asked.worker_cap))
    trees = _preflight(request, asked, cloud, env)
    task_args = {**(defaults.get("task_args") or {}), **asked.task_args, **parse_kv(request.task_args, "-T")}
    model_args = {**(defaults.get("model_args") or {}), **asked.model_args, **parse_kv(request.model_args, "-M")}
    requirements = [
        *split_list(cfg.setting_requirements),
        *split_list(defaults.get("requirements")),
        *overlay.expand(request.requirements),
    ]
    reqs = setting_plan.plan_requirements(requirements)
    located, extra = choosing.locate(request, asked, defaults, [tree.root for tree in trees], setting_envs)
    sources = SettingSources(extra_roots=tuple(extra))
    version = code.code_version(REPO_ROOT)
    shipped = ShippedCode.build(REPO_ROOT, version.sha, extra)
    if located:
        shipped.site = overlay.install(reqs, request.environ)  # the probe loads the task with them, as workers will
        chosen = choosing.plain_tasks(request, located, shipped, task_args, defaults, asked.sample_shuffle)
    else:
        chosen = choosing.settings_tasks(request, shipped, sources, task_args, defaults, requirements, setting_envs)
    epochs = request.epochs if request.epochs is not None else asked.run_epochs
    epochs = epochs if epochs is not None else int(defaults.get("epochs", chosen.default_epochs))
    external_sandbox = choosing.sandbox(request, asked, chosen, located, shipped)
    dotenv = credentials.read_dotenv(request.dotenv)
    secret_names = _secrets(cfg, env, dotenv, fleet_models, model_args, job_env, chosen)
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
            worker_setup=_worker_setup(cfg, extra),
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
    cfg: Ec2Config,
    env: dict[str, str],
    dotenv: dict[str, str],
    fleet_models: list[str],
    model_args: dict[str, Any],
    job_env: dict[str, str],
    chosen: choosing.ChosenTasks,
) -> list[str]:
    """The names of the secrets workers get: each model's key, forward_env and -e NAME=value.
    Refused here: a model with no key, secrets too big for the SSM parameters that carry
    them, and a -T or -M value that is a secret's (it would be written in clear)."""
    values = credentials.secret_values(dotenv, env)
    model_secrets: list[str] = []
    for model in fleet_models:
        preflight.check_model(model)
        model_secrets += models.check_model(model, model_args, values)
    secret_names = models.forward_names(model_secrets, [*split_list(cfg.forward_env), *job_env], values)
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

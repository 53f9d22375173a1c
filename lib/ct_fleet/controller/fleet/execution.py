"""A planned fleet, run: the cloud started, the fleet run to its end, the cloud closed.

`execute` is what `ct-fleet eval` calls after planning (and the cost confirmation);
`run_fleet` plans and executes in one call, for use as a library, taking what
`inspect_ai.eval()` takes:

    from ct_fleet import run_fleet

    logs = run_fleet("qa.py@qa", model="openai/gpt-4o-mini", temperature=0, epochs=3)
    print(logs[0].results, logs.result.fleet_id, logs.result.cost)
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...cloud import Cloud
from ...error_lines import epoch_range
from ...errors import BadInput
from ...protocol import FleetEnv, run_layout
from ...services.secrets import parameter_exists
from ..planning import (
    Capacity,
    FleetRequest,
    FleetSpec,
    PlannedFleet,
    docker_auth_params,
    fleet_fields,
    from_eval_args,
    launched_by,
    plan_fleet,
    survey,
    upload_extra_src,
    upload_wheel,
    worker_secrets,
)
from ..reporting import Progress, RunResult, keep_boot_logs, model_prices, write_report
from . import interrupts, phases, sweep
from .docker import DockerLease, prepare
from .lease import LocalLock
from .merging import publish
from .run import FleetRun
from .worker_env import fleet_env


@dataclass
class RunHooks:
    """How a run talks to whoever drives it (the CLI's console, or nothing)."""

    info: Callable[[str], None] = lambda text: None
    warn: Callable[[str], None] = lambda text: None
    on_progress: Callable[[Progress], None] = lambda p: None
    leave_running_on_interrupt: Callable[[], bool] = lambda: False


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
        tarball = _copy_whole(shipped.code_tarball, run_dir / run_layout.CODE_TARBALL)
        for tree in shipped.trees:
            _copy_whole(tree.tarball, run_layout.extra_tarball(run_dir, tree.name))
        with interrupts.stop_signals():
            return _execute(planned, hooks, tarball)
    finally:
        lock.release()


def _copy_whole(src: Path, dest: Path) -> Path:
    """Copy src to dest, or leave nothing at dest (a full disk would leave half a tarball)."""
    try:
        return Path(shutil.copy(src, dest))
    except BaseException:
        dest.unlink(missing_ok=True)
        raise


def _execute(planned: PlannedFleet, hooks: RunHooks, tarball: Path) -> RunResult:
    """The run's steps, from the cloud's start to the report; the cloud closes on every way out."""
    cloud = planned.cloud
    secrets = worker_secrets(planned.dotenv, dict(planned.environ), names=planned.spec.secret_names)
    phases.begin(planned.run_dir, planned.environ)
    cloud.start(planned.run_dir, planned.dotenv, planned.environ)
    leave_running = False
    docker: DockerLease | None = None
    try:
        if planned.docker.required and cloud.instances_run_here():
            docker = prepare(planned.docker, planned.run_dir / run_layout.DOCKER_LOG, hooks.info)
        fit = _ready_account(planned, hooks)
        # Local instances inherit this environment: without the secrets, so that jobs get
        # them only the way EC2 workers do, through SSM.
        cloud.attach_runner(planned.run_dir / run_layout.INSTANCES, planned.environ, withhold=secrets)
        caller = _caller(cloud)  # before any upload: credentials that STS refuses stop here
        extra_keys, wheel_keys = _upload_inputs(planned)
        _announce(planned, fit, hooks)
        fleet = _fleet_run(planned, hooks, fit, caller, secrets, extra_keys)
        try:
            env = _worker_env(planned, secrets, extra_keys, wheel_keys)
            result = fleet.run(tarball, env)
            result.dropped_messages = fleet.results.bad_messages
        except BaseException as exc:
            leave_running = bool(getattr(exc, "leave_running", False))
            raise
        _finish(result, planned, hooks)
        return result
    finally:
        cloud.close(leave_running=leave_running)
        if docker is not None and not leave_running:
            docker.release()


def _ready_account(planned: PlannedFleet, hooks: RunHooks) -> Capacity:
    """The account has what a fleet needs and the quota fits a worker (surveyed in planning
    where the cloud answered then), and secrets of dead fleets are gone."""
    cloud, cfg = planned.cloud, planned.spec.config
    fit = planned.capacity
    if fit is None:  # a cloud that answers only once started (the embedded one)
        cloud.prepare_account(cfg)
        fit = survey(cloud, cfg, planned.spec.fleet_id, hooks.warn)
    swept = sweep.sweep_orphan_secrets(cloud.client("ssm"), cloud.client("ec2"))
    if swept:
        hooks.warn(
            f"deleted {sum(swept.values())} secret(s) left by stopped fleet(s) {', '.join(sorted(swept))} "
            "(their controller died before its teardown)"
        )
    return fit


def _upload_inputs(planned: PlannedFleet) -> tuple[list[str], list[str]]:
    """The --extra-src trees and the setting's wheels in S3: their keys."""
    s3, bucket = planned.cloud.client("s3"), planned.spec.config.bucket
    extra_keys = [
        upload_extra_src(s3, bucket, tree.name, run_layout.extra_tarball(planned.run_dir, tree.name), tree.digest)
        for tree in planned.shipped.trees
    ]
    return extra_keys, [upload_wheel(s3, bucket, wheel) for wheel in planned.spec.wheels]


def _announce(planned: PlannedFleet, fit: Capacity, hooks: RunHooks) -> None:
    spec, cloud, cfg = planned.spec, planned.cloud, planned.spec.config
    what = f"policy {spec.policy}" if spec.policy else f"model {spec.model}"
    epochs = epoch_range(task.epochs_in(spec.epochs) for task in spec.tasks)  # tasks may run their own
    hooks.info(
        f"fleet {spec.fleet_id}: {len(spec.jobs)} jobs ({_describe_tasks(spec)} x {epochs} epochs), "
        f"{what}, {cloud.kind} cloud, up to {fit.max_workers} workers x {cfg.concurrency_per_worker}"
    )
    link = cloud.console_link(spec.fleet_id)
    if link:
        hooks.info(f"EC2 console: {link}")


def _caller(cloud: Cloud) -> tuple[str, str]:
    """(who launches, as tagged on the workers; the account id)."""
    sts = cloud.client("sts")
    return launched_by(sts, cloud.context.profile if cloud.context else None), sts.get_caller_identity()["Account"]


def _fleet_run(
    planned: PlannedFleet,
    hooks: RunHooks,
    fit: Capacity,
    caller: tuple[str, str],
    secrets: dict[str, str],
    extra_keys: list[str],
) -> FleetRun:
    return FleetRun(
        planned.cloud,
        planned.spec,
        planned.run_dir,
        launched_by=caller[0],
        account=caller[1],
        secrets=secrets,
        extra_src=extra_keys,
        on_progress=hooks.on_progress,
        warn=hooks.warn,
        leave_running_on_interrupt=hooks.leave_running_on_interrupt,
        capacity=fit,
        model_prices=model_prices(planned.environ),
    )


def _worker_env(
    planned: PlannedFleet, secrets: dict[str, str], extra_keys: list[str], wheel_keys: list[str]
) -> FleetEnv:
    cloud = planned.cloud
    # One look here spares every worker an SSM read at boot (an AWS CLI start, and SSM's 40
    # reads a second when hundreds launch at once) when there is nothing to read.
    registry = parameter_exists(cloud.client("ssm"), docker_auth_params(dict(planned.environ))[0]) is not False
    return fleet_env(planned.spec, cloud, secrets, extra_keys, wheel_keys, planned.environ, registry_auth=registry)


def _finish(result: RunResult, planned: PlannedFleet, hooks: RunHooks) -> None:
    """The run is done: say so on disk, publish the merged logs where asked, write the report."""
    cloud = planned.cloud
    phases.done(planned.run_dir)
    if planned.inspect.log_dir is not None and result.merged:
        _publish(result, planned, hooks)
    result.report = _report(
        cloud.client("s3") if cloud.failure() is None else None,
        planned.spec,
        planned.run_dir,
        model_prices(planned.environ),
        hooks.warn,
    )


def _publish(result: RunResult, planned: PlannedFleet, hooks: RunHooks) -> None:
    """--log-dir: the merged logs there too; one that cannot be written is said, not the run's failure."""
    asked = planned.inspect
    assert asked.log_dir is not None
    try:
        written = publish([m.path for m in result.merged], asked.log_dir, asked.log_format)
        hooks.info(f"merged logs also in {asked.log_dir}: {', '.join(p.name for p in written)}")
    except (OSError, ValueError) as exc:
        hooks.warn(
            f"could not write the merged logs to --log-dir {asked.log_dir} ({exc}); they are in {planned.run_dir}"
        )


def _report(s3: Any, spec: FleetSpec, run_dir: Path, prices: Path, warn: Callable[[str], None]) -> Path | None:
    """The run report, from what runs/<fleet>/ holds once the bootstrap logs are fetched
    (while the embedded cloud's S3 is still there; s3 None: a cloud that died has none to
    fetch). A report that cannot be written is said, never the run's failure: `ct-fleet
    report` can write it later."""
    try:
        if s3 is not None:
            keep_boot_logs(s3, spec.config.bucket, spec.fleet_id, run_dir)
        return write_report(run_dir, prices)
    except Exception as exc:
        warn(f"could not write the run report ({type(exc).__name__}: {exc}); try `ct-fleet report {spec.fleet_id}`")
        return None


def _describe_tasks(spec: FleetSpec) -> str:
    samples = sum(len(t.sample_ids) for t in spec.tasks)
    if len(spec.tasks) == 1:
        return f"{samples} samples of {spec.tasks[0].name}"
    return f"{samples} samples of {len(spec.tasks)} tasks: {', '.join(t.name for t in spec.tasks)}"


class FleetLogs(list[Any]):
    """What `run_fleet` returns: the merged logs' headers (`EvalLog`s, one per task x model,
    as `eval(..., log_header_only=True)` returns its logs), and the fleet's own `result`."""

    def __init__(self, logs: list[Any], result: RunResult) -> None:
        super().__init__(logs)
        self.result = result


def run_fleet(
    tasks: Any = None,
    model: Any = None,
    *,
    request: FleetRequest | None = None,
    hooks: RunHooks | None = None,
    **kwargs: Any,
) -> FleetLogs:
    """Run tasks on a fleet as `inspect_ai.eval()` runs them in one process, and merge.

        logs = run_fleet("qa.py@qa", model=["openai/gpt-4o", "openai/gpt-4o-mini"], temperature=0, epochs=3)
        logs = run_fleet(task_file="smoke", policy="honest", epochs=3)        # a setting's tasks
        logs = run_fleet(my_task(level=2), model="openai/gpt-4o", ec2=True, ec2_args=["max_workers=20"])

    Takes what eval() takes (task names, files, Task objects made by a @task function,
    a model or a list of them, and its keyword arguments: generate config, limits, solver,
    model roles, epochs, ...) and a fleet request's own fields (ec2, ec2_args,
    requirements, extra_src, task_file, policy, envs, ...). Returns the merged logs'
    headers, one per task x model, with `.result` (ct_fleet.RunResult: fleet id, counts,
    cost, problems). A billing cloud (ec2=True) needs `ec2_args=["auto_confirm=true"]`:
    there is nobody to ask.
    """
    from inspect_ai.log import read_eval_log

    fleet = {name: kwargs.pop(name) for name in fleet_fields(list(kwargs))}
    request = request or from_eval_args(tasks, model, fleet=fleet, **kwargs)
    planned = plan_fleet(request)
    if planned.cloud.bills and not planned.spec.config.auto_confirm:
        raise BadInput("run_fleet on a billing cloud needs ec2_args=['auto_confirm=true'] (no one to confirm the cost)")
    if planned.large and not planned.spec.config.auto_confirm:
        raise BadInput(
            f"{len(planned.spec.jobs):,} jobs is a large run: pass ec2_args=['auto_confirm=true'] to start it"
        )
    result = execute(planned, hooks)
    return FleetLogs([read_eval_log(str(m.path), header_only=True) for m in result.merged], result)

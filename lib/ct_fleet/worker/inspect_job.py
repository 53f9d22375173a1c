"""What one Inspect job runs: the task as this worker sees it, for one sample and one epoch.

Shared by both runners (the per-process `python -m ct_fleet.worker.runner` and the warm
fork server): `build_task(job)` builds the job's task as `inspect eval` would from its
spec and arguments, `run_inspect_job(job, out, task)` leaves one finished, relabelled
.eval at `out` and, beside it, the images its Docker sandboxes ran (sandbox.digests).

A work message names its task relative to a root (protocol.messages.TaskRoot): the code
root (the job's working directory), the directory holding the --extra-src trees
(CT_EXTRA_ROOT, set by worker/run-worker.sh), the package of the job's setting, or
Inspect's registry. The sample id keeps its type: Inspect matches ids by their text, but
the log records the id as given, and the merged run must hold the task's own ids.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import sys
from collections.abc import Mapping
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from ..protocol import WorkMessage
from ..sandbox.digests import job_images, write_sidecar
from . import checkpoints as checkpoint_store

if TYPE_CHECKING:
    from inspect_ai.log import EvalLog

EXTRA_ROOT_ENV = "CT_EXTRA_ROOT"


def extra_root(environ: Mapping[str, str]) -> Path | None:
    """Where the --extra-src trees are on this machine (job-env.sh's CT_EXTRA_ROOT), read
    from the environment of a job's process by its entry."""
    value = environ.get(EXTRA_ROOT_ENV)
    return Path(value) if value else None


def task_spec_here(job: WorkMessage, *, code_root: Path | None = None, extra: Path | None = None) -> str:
    """The job's task spec resolved on this machine (what `inspect eval` is given)."""
    return spec_here(job.task_root, job.task_spec, job.setting, code_root=code_root, extra=extra)


def spec_here(
    root: str, spec: str, setting: str | None, *, code_root: Path | None = None, extra: Path | None = None
) -> str:
    """A task's (or a --solver's) spec relative to its root, resolved on this machine."""
    if root == "registry":
        return spec
    if root == "extra":
        if extra is None:
            raise RuntimeError(f"{spec} is in an --extra-src tree but {EXTRA_ROOT_ENV} is not set")
        return str(extra / spec)
    if root == "setting":
        from ..settings import SettingSources, load_setting

        if not setting:
            raise RuntimeError(f"{spec} is relative to a setting but the job names none")
        return str(load_setting(setting, SettingSources.under(extra)).package_dir / spec)
    return spec if code_root is None else str(code_root / spec)


def job_options(job: WorkMessage, extra: Path | None) -> dict[str, Any]:
    """The job's Inspect options, a --solver file resolved where it shipped."""
    options = dict(job.inspect_options)
    root, path = options.pop("solver_root", None), options.pop("solver_path", None)
    if root and path:
        options["solver"] = spec_here(root, path, job.setting, extra=extra)
    return options


def import_setting(job: WorkMessage, extra: Path | None) -> None:
    """Import the job's setting first: it may register the task, policies or a sandbox."""
    if job.setting:
        from ..settings import SettingSources, load_setting

        load_setting(job.setting, SettingSources.under(extra))


def sandbox_type(ref: str | None) -> str | None:
    """module:type -> import the module (it registers the sandbox type) and name the type."""
    if not ref:
        return None
    module, _, kind = ref.partition(":")
    importlib.import_module(module)
    return kind


def task_key(job: WorkMessage) -> str:
    """Jobs with equal keys run the same built task (what a warm runner caches)."""
    parts = [job.task_root, job.task_spec, job.task_args, job.setting, job.sandbox]
    return json.dumps(parts, sort_keys=True, default=str)


def build_task(job: WorkMessage, extra: Path | None) -> Any:
    """The job's Inspect task, built as `inspect eval` builds it from a spec and task args.

    Uses inspect's task loader (private, see ct_fleet/inspect_private.py): a Task built by
    it and passed to eval() resolves to the same task file, registry name and args as the
    spec itself (tests/worker/test_warm_runner.py pins the parity).
    """
    from ..inspect_private import load_tasks

    import_setting(job, extra)
    sandbox_type(job.sandbox)
    tasks = load_tasks([task_spec_here(job, extra=extra)], job.task_args)
    if len(tasks) != 1:
        raise RuntimeError(f"{job.task_spec} names {len(tasks)} tasks, expected one")
    return tasks[0]


# How a job's process runs Inspect, whatever the job's options (the fleet refuses both as
# options). The display: "log" draws nothing, and a task that fails logs its traceback to
# the job's log. "none" is Inspect's rich display on a quiet console: it still lays out
# its task panel at every refresh and throws it away, ~25 ms of CPU in a one-sample eval
# of ~65 ms. No control server: no `inspect ctl` client drives a fleet's job (the fleet is
# watched with `ct-fleet status`), and starting one (uvicorn and FastAPI) cost every warm
# runner and every cold job 0.45 s of CPU. The warm runner's server warms up the same way
# (Inspect keeps the display object it made first, and a forked job inherits it).
JOB_PROCESS: Final[Mapping[str, Any]] = {"display": "log", "ctl_server": False}


def run_inspect_job(
    job: WorkMessage, out: Path, task: Any = None, extra: Path | None = None, checkpoints: str | None = None
) -> None:
    """Run the job's sample for one epoch, relabel it as the job's epoch, move it to `out`;
    `task` is the job's built task (build_task), if a warm runner built it already; `extra`
    is where the --extra-src trees are (extra_root), for a task in one of them;
    `checkpoints` is where a --checkpoint job keeps its checkpoints (worker/checkpoints.py):
    an earlier attempt's there is resumed from."""
    from inspect_ai import eval as inspect_eval
    from inspect_ai import eval_retry

    from ..evallog.relabel import add_prior_time, relabel_epoch
    from ..inspect_options import eval_kwargs
    from . import job_hook

    job_hook.start(out)
    if task is None:
        import_setting(job, extra)
    log_dir = job_log_dir(out, os.getpid())
    shutil.rmtree(log_dir, ignore_errors=True)  # a killed process's that had this pid
    log_dir.mkdir(parents=True)
    # The user's Inspect options, parsed as `inspect eval` parses them; the job's own
    # selection (one sample, one epoch, its log directory) over them.
    options: dict[str, Any] = {"time_limit": job.time_limit or None, "sandbox": sandbox_type(job.sandbox)}
    options.update(eval_kwargs(job_options(job, extra), epochs=1))
    plan = prior = None
    if checkpoints and options.get("checkpoint"):
        if task is None:
            task = build_task(job, extra)  # what it sandboxes decides what is captured
        config = checkpoint_store.local_sandbox_default(
            options["checkpoint"], task, job.sample_id, options.get("sandbox")
        )
        plan = checkpoint_store.plan(checkpoints, config, log_dir / "prior")
        options["checkpoint"] = plan.config
    try:
        logs = None
        prior = checkpoint_store.resume_log(plan, _task_file(job, extra)) if plan else None
        if plan is not None and prior is not None:
            with checkpoint_store.keep_started_log(plan, log_dir):
                # Inspect's own resume: the sample, its options and its model come from the log.
                failed: str | None
                try:
                    logs = eval_retry(
                        prior, log_dir=str(log_dir), log_format="eval", **JOB_PROCESS, **_retry_options(options)
                    )
                except Exception as exc:
                    failed = checkpoint_store.raised_in_resume(exc)
                    if failed is None:
                        raise
                else:
                    failed = checkpoint_store.resume_failure(logs)
            if failed is not None:
                # A rerun never turns a fresh start into a failed sample.
                plan, prior, logs = checkpoint_store.start_over(plan, log_dir, failed), None, None
        if logs is None:
            with checkpoint_store.keep_started_log(plan, log_dir) if plan else nullcontext():
                logs = inspect_eval(
                    task_spec_here(job, extra=extra) if task is None else task,
                    # a built task carries its args already (eval() would warn about them)
                    task_args=job.task_args if task is None else {},
                    model=job.model,
                    model_args=job.model_args,
                    sample_id=[job.sample_id],
                    log_dir=str(log_dir),
                    log_format="eval",
                    **JOB_PROCESS,
                    **options,
                )
        if not logs or not logs[0].location:
            raise RuntimeError("inspect eval wrote no log")
        path = Path(logs[0].location)
        _record_images(logs[0], out)  # before the move: the log reads its samples from its file
        restored = job_hook.prior_time()
        if prior is not None:
            checkpoint_store.record_resume(logs[0], out, restored)
            if restored is not None:
                add_prior_time(path, *restored)
        if plan is not None:
            checkpoint_store.record_cost(logs[0], out)
        relabel_epoch(path, job.epoch)
        if plan is not None:
            checkpoint_store.drop_staging(log_dir)
        shutil.move(str(path), out)
    finally:
        job_hook.finish(out)
        if plan is not None:
            checkpoint_store.drop_staging(log_dir)
        shutil.rmtree(log_dir, ignore_errors=True)


def _task_file(job: WorkMessage, extra: Path | None) -> str | None:
    """The job's task file on this machine (a resumed log names the first attempt's)."""
    spec = task_spec_here(job, extra=extra).split("@", 1)[0]
    return spec if spec.endswith(".py") else None


def _retry_options(options: dict[str, Any]) -> dict[str, Any]:
    """What eval_retry takes of the job's options (the rest it reads from the log)."""
    import inspect as pyinspect

    from inspect_ai import eval_retry

    taken = set(pyinspect.signature(eval_retry).parameters) - {"tasks", "log_dir", "log_format", *JOB_PROCESS}
    return {k: v for k, v in options.items() if k in taken and v is not None}


def job_log_dir(out: Path, pid: int) -> Path:
    """Where the job process `pid` has its Inspect write its log before it moves to OUT:
    beside OUT, named for it and for the process (two attempts of one job may run at once
    on one worker), so that what a job killed mid-sample leaves (this directory, and the
    sample buffer Inspect keeps for it, which every later eval's clean-up stats) can be
    cleared by whoever ran it (worker/forkserver.py)."""
    return out.absolute().with_name(f".{out.name}.{pid}.inspect")


def _record_images(log: EvalLog, out: Path) -> None:
    """The images (and digests) the sample's sandboxes ran, beside OUT for the done report.

    Best effort: a finished job stands even when its images cannot be read."""
    try:
        sandboxes = [(s.sandbox.type, s.sandbox.config) for s in log.samples or [] if s.sandbox]
        write_sidecar(out, job_images(sandboxes))
    except Exception as exc:
        print(f"ct-fleet job: could not record the sandbox images: {exc!r}", file=sys.stderr)


def command_env(job: WorkMessage, out: Path, extra: Path | None) -> dict[str, str]:
    """What a command job (and any job's process) sees of its job, in the task's own terms."""
    try:
        task = task_spec_here(job, extra=extra)
    except Exception:  # the command may not need it; the spec as sent is the next best
        task = job.task_spec
    return {
        "CT_JOB_ID": job.job_id,
        "CT_SAMPLE_ID": str(job.sample_id),
        "CT_EPOCH": str(job.epoch),
        "CT_TASK": task,
        "CT_MODEL": job.model,
        "CT_OUTPUT": str(out),
    }


def finish_command_output(job: WorkMessage, out: Path) -> None:
    """A command's log of one epoch becomes the job's epoch, like an Inspect job's."""
    from ..evallog.relabel import relabel_epoch

    relabel_epoch(out, job.epoch)

"""Run one job (one sample x one epoch) and leave exactly one finished .eval at OUT.

    python -m ct_fleet.worker.runner '<work message json>' OUT

This is the per-process runner: a fresh interpreter per job, from the code root, so a
crash, a leak or a hung sandbox takes down one job and not the worker. The warm runner
(worker/forkserver.py) calls the same `run_inspect` in a child forked from a process
that has inspect_ai imported and the task built already (`build_task`). Inspect jobs run
the setting's task for the one sample with epochs=1; the log is then relabelled as the
job's epoch so the merged run holds every (sample, epoch); the images its Docker
sandboxes ran are left beside OUT (sandbox.digests) for the worker's done report. Command
jobs run a shell template (for other eval CLIs) that must write the .eval to $CT_OUTPUT.
Exit status: 0 when OUT holds a finished log (even if the sample failed), else non-zero.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..protocol import WorkMessage
from ..sandbox.digests import job_images, write_sidecar

if TYPE_CHECKING:
    from inspect_ai.log import EvalLog


def _sandbox(ref: str | None) -> str | None:
    """module:type -> import the module (it registers the sandbox type) and name the type."""
    if not ref:
        return None
    module, _, kind = ref.partition(":")
    importlib.import_module(module)
    return kind


def task_key(job: WorkMessage) -> str:
    """Jobs with equal keys run the same built task (what a warm runner caches)."""
    return json.dumps([job.task_spec, job.task_args, job.sandbox], sort_keys=True, default=str)


def build_task(job: WorkMessage) -> Any:
    """The job's Inspect task, built as `inspect eval` builds it from a spec and task args.

    Uses inspect's task loader (`inspect_ai._eval.loader.load_tasks`, private; pinned at
    0.3.285): a Task built by it and passed to eval() resolves to the same task file,
    registry name and args as the spec itself (tests/test_warm_runner.py pins the parity).
    """
    from inspect_ai._eval.loader import load_tasks

    _sandbox(job.sandbox)
    tasks = load_tasks([job.task_spec], job.task_args)
    if len(tasks) != 1:
        raise RuntimeError(f"{job.task_spec} names {len(tasks)} tasks, expected one")
    return tasks[0]


def run_inspect(job: WorkMessage, out: Path, task: Any = None) -> None:
    """Run the job's one sample into OUT; `task` is the job's built task, if already built."""
    from inspect_ai import eval as inspect_eval

    from ..evallog.relabel import relabel_epoch

    with tempfile.TemporaryDirectory(prefix="ct-job-") as log_dir:
        logs = inspect_eval(
            job.task_spec if task is None else task,
            # a built task carries its args already (eval() would warn about them)
            task_args=job.task_args if task is None else {},
            model=job.model,
            sample_id=[job.sample_id],
            epochs=1,
            log_dir=log_dir,
            log_format="eval",
            display="none",
            time_limit=job.time_limit or None,
            sandbox=_sandbox(job.sandbox),
        )
        if not logs or not logs[0].location:
            raise RuntimeError("inspect eval wrote no log")
        path = Path(logs[0].location)
        _record_images(logs[0], out)  # before the move: the log reads its samples from its file
        relabel_epoch(path, job.epoch)
        shutil.move(str(path), out)


def _record_images(log: EvalLog, out: Path) -> None:
    """The images (and digests) the sample's sandboxes ran, beside OUT for the done report.

    Best effort: a finished job stands even when its images cannot be read."""
    try:
        sandboxes = [(s.sandbox.type, s.sandbox.config) for s in log.samples or [] if s.sandbox]
        write_sidecar(out, job_images(sandboxes))
    except Exception as exc:  # noqa: BLE001
        print(f"ct-fleet runner: could not record the sandbox images: {exc!r}", file=sys.stderr)


def run_command(job: WorkMessage, out: Path) -> None:
    env = {
        **os.environ,
        "CT_JOB_ID": job.job_id,
        "CT_SAMPLE_ID": job.sample_id,
        "CT_EPOCH": str(job.epoch),
        "CT_OUTPUT": str(out),
    }
    subprocess.run(["bash", "-c", job.command or ""], env=env, check=True)
    if not out.exists():
        raise RuntimeError(f"command job wrote nothing to {out}")


def main(argv: list[str]) -> int:
    job = WorkMessage.from_json(argv[1])
    out = Path(argv[2])
    (run_command if job.kind == "command" else run_inspect)(job, out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

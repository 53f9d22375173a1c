"""Run one job (one sample x one epoch) and leave exactly one finished .eval at OUT.

    python -m ct_fleet.worker.runner '<work message json>' OUT

This is the per-process runner: a fresh interpreter per job, from the code root, so a
crash, a leak or a hung sandbox takes down one job and not the worker. The warm runner
(worker/forkserver.py) calls the same `run_inspect` in a child forked from a process
that has inspect_ai imported and the task built already (`build_task`). What a job runs
(its task resolved on this worker, task and model arguments, the sample id with its
type, the sandbox) is ct_fleet.worker.inspect_job, shared by both: the sample runs with
epochs=1 and the log is relabelled as the job's epoch so the merged run holds every
(sample, epoch); the images its Docker sandboxes ran are left beside OUT
(sandbox.digests) for the worker's done report. Command jobs run a shell template (for
other eval CLIs) that must write the .eval to $CT_OUTPUT; its log is relabelled the same way.
Exit status: 0 when OUT holds a finished log (even if the sample failed); failures.TASK_FAILED
when the task raised (it did not load, did not import, Inspect refused it), after a summary
line the worker reads; else non-zero.
"""

from __future__ import annotations

import os
import subprocess
import sys
import traceback
from collections.abc import Mapping
from pathlib import Path

from ..exits import leave
from ..protocol import WorkMessage
from . import failures
from .checkpoints import CHECKPOINTS_ENV
from .inspect_job import (
    JOB_PROCESS,
    build_task,
    command_env,
    extra_root,
    finish_command_output,
    job_log_dir,
    run_inspect_job,
    task_key,
)

# The warm runner's names for what a job runs.
run_inspect = run_inspect_job
__all__ = [
    "CHECKPOINTS_ENV",
    "JOB_PROCESS",
    "build_task",
    "extra_root",
    "job_log_dir",
    "main",
    "report_failure",
    "run_command",
    "run_inspect",
    "task_key",
]


def run_command(job: WorkMessage, out: Path, environ: Mapping[str, str]) -> None:
    job_env = command_env(job, out, extra_root(environ))
    subprocess.run(["bash", "-c", job.command or ""], env={**environ, **job_env}, check=True)
    if not out.exists():
        raise RuntimeError(f"command job wrote nothing to {out}")
    finish_command_output(job, out)


def main(argv: list[str]) -> int:
    """A job's process (the worker's per-process runner, `ct-fleet run-job`): its entry reads
    its environment, which the worker gave it."""
    job = WorkMessage.from_json(argv[1])
    out = Path(argv[2])
    environ = dict(os.environ)
    if job.kind == "command":
        run_command(job, out, environ)
        return 0
    try:
        run_inspect_job(job, out, extra=extra_root(environ), checkpoints=environ.get(CHECKPOINTS_ENV))
    except Exception as exc:
        return report_failure(exc)
    return 0


def report_failure(exc: BaseException) -> int:
    """Print the traceback, then the summary line the worker reads; the exit status says
    whether the task or the machine failed (worker/failures.py)."""
    traceback.print_exc()
    print(failures.summary_line(exc), file=sys.stderr, flush=True)
    return failures.exit_status(exc)


if __name__ == "__main__":
    leave(main(sys.argv))

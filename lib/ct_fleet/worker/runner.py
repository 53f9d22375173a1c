"""Run one job (one sample x one epoch) and leave exactly one finished .eval at OUT.

    python -m ct_fleet.worker.runner '<work message json>' OUT

The worker starts this in a fresh subprocess per job, from the code root, so a crash,
a leak or a hung sandbox takes down one job and not the worker. Inspect jobs run the
job's task for the one sample with epochs=1 (ct_fleet.worker.inspect_job); the log is
then relabelled as the job's epoch so the merged run holds every (sample, epoch).
Command jobs run a shell template (for other eval CLIs) that must write the .eval to
$CT_OUTPUT; its log is relabelled the same way.
Exit status: 0 when OUT holds a finished log (even if the sample failed), else non-zero.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ..protocol import WorkMessage
from .inspect_job import command_env, finish_command_output, run_inspect_job


def run_command(job: WorkMessage, out: Path) -> None:
    subprocess.run(["bash", "-c", job.command or ""], env={**os.environ, **command_env(job, out)}, check=True)
    if not out.exists():
        raise RuntimeError(f"command job wrote nothing to {out}")
    finish_command_output(job, out)


def main(argv: list[str]) -> int:
    job = WorkMessage.from_json(argv[1])
    out = Path(argv[2])
    (run_command if job.kind == "command" else run_inspect_job)(job, out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

"""`ct-fleet run-job`: rerun one job of a fleet here, as a worker would."""

from __future__ import annotations

import os
import subprocess
import sys

import click

from ..controller.run import RUNS_DIR
from ..errors import BadInput
from ..evallog import read_header, sample_error
from ..paths import REPO_ROOT, SETTINGS_DIR
from ..protocol import Manifest
from .console import console, err


@click.command(name="run-job")
@click.argument("fleet_id")
@click.argument("job_id")
def run_job_command(fleet_id: str, job_id: str) -> None:
    """Run one job of a fleet here, as a worker would, to debug it.

    \b
    Reads runs/FLEET_ID/manifest.json and writes runs/FLEET_ID/rerun/JOB_ID.eval.
    The dead-letter report of a run prints this command for every job that failed.
    """
    path = RUNS_DIR / fleet_id / "manifest.json"
    if not path.exists():
        raise BadInput(f"no manifest at {path}: run the fleet from this checkout first")
    try:
        manifest = Manifest.from_json(path.read_text())
    except ValueError as exc:
        raise BadInput(f"{path}: {exc}; rerun the fleet to rewrite it") from None
    job = manifest.job(job_id)
    if job is None:
        raise BadInput(f"fleet {fleet_id} has no job {job_id}")
    message = manifest.work_message(job)
    out = RUNS_DIR / fleet_id / "rerun" / f"{job_id}.eval"
    out.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT / "lib"), str(SETTINGS_DIR), str(REPO_ROOT)])}
    console.print(f"running {job.sample_id} epoch {job.epoch} of fleet {fleet_id} here", highlight=False)
    cmd = [sys.executable, "-m", "ct_fleet.worker.runner", message.to_json(), str(out)]
    proc = subprocess.run(cmd, cwd=REPO_ROOT, env=env)
    header = read_header(out) if out.exists() else None
    if proc.returncode != 0 or header is None:
        err.print(f"[bold red]job failed[/] (runner exit {proc.returncode})")
        sys.exit(1)
    error = sample_error(header)
    console.print(f"{'sample error: ' + error if error else 'success'}; log: {out}", highlight=False)

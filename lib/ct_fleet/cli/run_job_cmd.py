"""`ct-fleet run-job`: rerun one job of a fleet here, as a worker would."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

import click

from ..controller.planning import (
    dotenv_path,
    installed_site,
    model_needs,
    read_dotenv,
    secret_values,
    worker_secrets,
)
from ..errors import BadInput
from ..evallog import read_header, sample_error
from ..paths import REPO_ROOT, WORKER_SCRIPTS, runs_dir
from ..protocol import Manifest, run_layout
from ..protocol.keys import extra_src_basename
from ..worker.inspect_job import command_env
from .console import console, err

ERROR_LINES = 12
JOB_ENV = WORKER_SCRIPTS / "job-env.sh"


def _requirements_site(requirements: list[str]) -> Path | None:
    """The fleet's requirements as a local instance has them: this machine's shared install
    (the controller's, or made now), on the job's PYTHONPATH as LB_SITE."""
    if not requirements:
        return None
    return installed_site(requirements, os.environ)


def _unpack_extra(run_dir: Path, keys: list[str], dest: Path) -> None:
    """The fleet's --extra-src trees, from the tarballs the controller kept in the run dir."""
    dest.mkdir(parents=True, exist_ok=True)
    for key in keys:
        tarball = run_layout.extra_tarball(run_dir, extra_src_basename(key))
        if not tarball.exists():
            raise BadInput(f"{tarball} is missing: rerun the fleet from this checkout to rebuild it")
        with tarfile.open(tarball) as tar:
            tar.extractall(dest, filter="data")


@click.command(name="run-job")
@click.argument("fleet_id")
@click.argument("job_id")
def run_job_command(fleet_id: str, job_id: str) -> None:
    """Run one job of a fleet here, as a worker would, to debug it.

    \b
    Reads runs/FLEET_ID/manifest.json and writes runs/FLEET_ID/rerun/JOB_ID.eval.
    The dead-letter report of a run prints this command for every job that failed.
    """
    run_dir = runs_dir(os.environ) / fleet_id
    path = run_dir / run_layout.MANIFEST
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
    rerun = run_dir / run_layout.RERUN
    out = rerun / f"{job_id}.eval"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    extra = rerun / "extra"
    _unpack_extra(run_dir, manifest.extra_src, extra)
    # The secrets a worker would get through SSM, from the shell or .env here.
    dotenv = read_dotenv(dotenv_path(os.environ))
    values = secret_values(dotenv, os.environ)
    names = model_needs(manifest.model, manifest.model_args).names(values)
    forward = [n.strip() for n in str(manifest.config.get("forward_env") or "").split(",") if n.strip()]
    env = {
        **os.environ,
        **worker_secrets(dotenv, os.environ, names=[*names, *forward]),
        # The worker's own job environment (worker/job-env.sh), over this checkout and the
        # trees unpacked here; LB_HOME keeps it away from a real worker's /etc/linuxbench.
        "LB_HOME": str(rerun / "home"),
        "LB_ROOT": str(REPO_ROOT),
        "LB_EXTRA": str(extra),
        "LB_VENV": sys.prefix,
    }
    site = _requirements_site(manifest.setting_requirements)
    if site:
        env["LB_SITE"] = str(site)
    env.update(command_env(message, out, extra))  # the job's identity, as a worker's job sees it
    console.print(f"running {job.sample_id!r} epoch {job.epoch} of fleet {fleet_id} here", highlight=False)
    cmd = [str(JOB_ENV), sys.executable, "-m", "ct_fleet.worker.runner", message.to_json(), str(out)]
    proc = subprocess.run(cmd, cwd=REPO_ROOT, env=env, stderr=subprocess.PIPE, text=True)
    header = read_header(out) if out.exists() else None
    if proc.returncode != 0 or header is None:
        lines = [line for line in proc.stderr.splitlines() if line.strip()][-ERROR_LINES:]
        err.print(f"[bold red]job failed[/] (runner exit {proc.returncode}):", highlight=False)
        for line in lines:
            err.print(f"  {line}", highlight=False, markup=False)
        sys.exit(1)
    error = sample_error(header)
    console.print(f"{'sample error: ' + error if error else 'success'}; log: {out}", highlight=False)

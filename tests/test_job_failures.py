"""A job that fails for a reason no retry can fix is reported at once, with its own error text.

The task loads on the controller (preflight passes) but its jobs cannot import a module
on the workers: each job fails once, is not retried into the dead-letter queue, and the
run exits non-zero naming the job's own error, as does `run-job`.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from fleet_helpers import FAST, REPO, env_for, stat

TASK = """
import os

from inspect_ai import Task, task
from inspect_ai.dataset import MemoryDataset, Sample


@task
def needs_laptop():
    if os.environ.get("CODE_ROOT"):  # on a worker: a package only the researcher's laptop has
        import package_only_on_my_laptop  # noqa: F401
    return Task(dataset=MemoryDataset([Sample(id=i, input="x") for i in (1, 2)], name="laptop"))
"""


def ct_fleet(runs: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(REPO / "bin" / "ct-fleet"), *args],
        cwd=REPO,
        env={**env_for(runs), "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.e2e
def test_fatal_job_failure_is_final_after_one_attempt(tmp_path: Path):
    project = tmp_path / "laptop"
    project.mkdir()
    (project / "needs.py").write_text(TASK)
    runs = tmp_path / "runs"
    proc = ct_fleet(runs, "eval", f"{project / 'needs.py'}@needs_laptop", *FAST)
    out = " ".join(proc.stdout.split())
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert stat(out, "attempts") == 2 and stat(out, "redeliveries") == 0  # one attempt per job
    assert "jobs without a result" in proc.stdout and "fatal" in proc.stdout
    assert "No module named 'package_only_on_my_laptop'" in proc.stdout  # the job's own words
    assert "failed, not retried (fatal)" in proc.stderr  # said as it happened
    assert "2 job(s) failed without a result (fatal)" in proc.stderr
    rerun = re.search(r"bin/ct-fleet run-job (\w+) (\w+)", proc.stdout)
    assert rerun
    again = subprocess.run(
        [str(REPO / "bin" / "ct-fleet"), "run-job", rerun.group(1), rerun.group(2)],
        cwd=REPO,
        env=env_for(runs),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert again.returncode == 1, again.stdout + again.stderr
    assert "No module named 'package_only_on_my_laptop'" in again.stderr

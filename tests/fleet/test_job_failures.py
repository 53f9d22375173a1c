"""A job that fails for a reason no retry can fix is reported at once, with its own error text.

Tasks that load on the controller (preflight passes) but not on the workers: each job
fails once, is not retried into the dead-letter queue, and the run exits non-zero naming
the jobs' own errors, as does `run-job`. A sandbox that cannot build is fatal too, and a
compose image that cannot be made is refused before launch.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from testkit.fleet import FAST, ONE_WORKER, env_for, fleet_dir, run_cli, stat

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


def ct_fleet(runs: Path, *args: str, **extra_env: str) -> subprocess.CompletedProcess[str]:
    return run_cli(args, env={**env_for(runs, **extra_env), "COLUMNS": "200"}, timeout=600)


# A task that loads on the controller and raises on a worker, with an error whose text
# marks nothing as fatal: the runner's exit status does (worker/failures.py).
RAISES = """
import os

from inspect_ai import Task, task
from inspect_ai.dataset import MemoryDataset, Sample


@task
def broken():
    if os.environ.get("CODE_ROOT"):  # on a worker
        raise RuntimeError("the lab's config is only on my laptop")
    return Task(dataset=MemoryDataset([Sample(id=i, input="x") for i in (1, 2)], name="broken"))
"""
MISSING = "No module named 'package_only_on_my_laptop'"
RAISED = "RuntimeError: the lab's config is only on my laptop"


@pytest.mark.e2e
def test_tasks_that_fail_to_load_on_workers_are_fatal_after_one_attempt_and_say_why(tmp_path: Path):
    """One run of two tasks, two jobs each: one imports a module only the laptop has, the
    other raises an error whose text marks nothing as fatal."""
    laptop, lab = tmp_path / "laptop", tmp_path / "lab"
    laptop.mkdir()
    lab.mkdir()
    (laptop / "needs.py").write_text(TASK)
    (lab / "lab.py").write_text(RAISES)
    runs = tmp_path / "runs"
    proc = ct_fleet(runs, "eval", f"{laptop / 'needs.py'}@needs_laptop", f"{lab / 'lab.py'}@broken", *FAST, *ONE_WORKER)
    out = " ".join(proc.stdout.split())
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert stat(out, "attempts") == 4 and stat(out, "redeliveries") == 0  # one attempt per job, not retried
    assert "workers keep dying" not in proc.stderr
    assert "failed, not retried (fatal)" in proc.stderr  # said as it happened
    progress = [line for line in proc.stdout.splitlines() if line.startswith("progress:")]
    assert any("failed: " in line and "fatal: " in line for line in progress), progress  # live
    table = " ".join(proc.stdout[proc.stdout.index("jobs without a result") :].split())
    assert "fatal" in table and MISSING in table and RAISED in table  # the final table, the jobs' own words
    ending = proc.stderr[proc.stderr.index("not a complete, successful run") :]
    assert "4 job(s) failed without a result (fatal)" in ending
    for words in (MISSING, RAISED):
        assert re.search(rf"2 x fatal: .*{re.escape(words)}", ending), ending  # the exit message, grouped
    rerun = re.search(r"bin/ct-fleet run-job (\w+) (\w+)", proc.stdout)
    assert rerun
    again = run_cli(["run-job", rerun.group(1), rerun.group(2)], env=env_for(runs), timeout=300)
    assert again.returncode == 1, again.stdout + again.stderr
    assert MISSING in again.stderr or RAISED in again.stderr, again.stderr[-3000:]


UNBUILDABLE = """
from inspect_ai import Task, task
from inspect_ai.dataset import MemoryDataset, Sample


@task
def unbuildable():
    return Task(
        dataset=MemoryDataset([Sample(id=i, input="x") for i in (1, 2)], name="unbuildable"),
        sandbox="docker",  # a Dockerfile alone: Inspect makes the compose file on the worker
    )
"""


@pytest.mark.e2e
def test_a_sandbox_that_cannot_build_is_fatal_and_names_the_cause(tmp_path: Path, docker_daemon):
    """Inspect says only `Failed to build docker containers`; the build's own error line is
    in the job's output, and goes into the report. (A Dockerfile alone is built on the
    worker; a compose file's images are made ready before launch, below.)"""
    project = tmp_path / "lab"
    project.mkdir()
    (project / "lab.py").write_text(UNBUILDABLE)
    (project / "Dockerfile").write_text("FROM scratch\nRUN false\n")  # offline: no base image to pull
    runs = tmp_path / "runs"
    proc = ct_fleet(runs, "eval", f"{project / 'lab.py'}@unbuildable", *FAST)
    out = " ".join(proc.stdout.split())
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert stat(out, "attempts") == 2 and stat(out, "redeliveries") == 0
    ending = proc.stderr[proc.stderr.index("not a complete, successful run") :]
    assert "2 job(s) failed without a result (fatal)" in ending
    assert re.search(r"fatal: PrerequisiteError: Failed to build docker containers: failed to solve: ", ending), ending
    assert "ExceptionGroup" not in ending


BOXED = """
from inspect_ai import Task, task
from inspect_ai.dataset import MemoryDataset, Sample


@task
def boxed():
    return Task(dataset=MemoryDataset([Sample(id=1, input="x")], name="boxed"), sandbox="docker")
"""


@pytest.mark.parametrize(
    "service, files, cause",
    [
        ("build: .", {"Dockerfile": "FROM scratch\nRUN false\n"}, r"building default failed: failed to solve: "),
        (
            "image: ct-fleet-test/nowhere:1",
            {},
            r"image ct-fleet-test/nowhere:1 \(service default\) could not be pulled: ",
        ),
    ],
    ids=["build", "pull"],
)
def test_a_compose_image_that_cannot_be_made_is_refused_before_launch(
    tmp_path: Path, docker_daemon, service: str, files: dict[str, str], cause: str
):
    """The workers share this machine's Docker: the compose file's images are built (or
    pulled, offline here) once before launch, and a failure is one line naming the image."""
    project = tmp_path / "lab"
    project.mkdir()
    (project / "lab.py").write_text(BOXED)
    (project / "compose.yaml").write_text(f"services:\n  default:\n    {service}\n    command: sleep infinity\n")
    for name, text in files.items():
        (project / name).write_text(text)
    runs = tmp_path / "runs"
    proc = ct_fleet(runs, "eval", str(project / "lab.py"), *FAST)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, proc.stderr
    assert re.search(r"^error: the Docker sandbox's images are not ready: lab/compose\.yaml: " + cause, errors[0])
    assert not list(runs.glob("*/instances/*")), "nothing was launched"


FLAKY = """
import os

from inspect_ai import Task, task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import ModelOutput
from inspect_ai.scorer import includes
from inspect_ai.solver import Generate, TaskState, solver


@solver
def flaky():
    async def solve(state: TaskState, generate: Generate) -> TaskState:
        if os.environ.get("CT_FAULT_ERROR"):  # the test's outage: every sample errors
            raise RuntimeError("the tool service went down")
        state.output = ModelOutput.from_content("flaky", "ok")
        return state

    return solve


@task
def flaky_task():
    samples = [Sample(id=i, input="x", target="ok") for i in (1, 2, 3)]
    return Task(dataset=MemoryDataset(samples, name="flaky"), solver=flaky(), scorer=includes())
"""


@pytest.mark.e2e
def test_a_rerun_retries_errored_samples_unless_told_to_keep_them(tmp_path: Path):
    from inspect_ai.log import read_eval_log

    from ct_fleet.controller.reporting import RunSummary

    project = tmp_path / "project"  # its own tree: the task's directory ships (and is in the fleet id)
    project.mkdir()
    (project / "flaky.py").write_text(FLAKY)
    runs, task = tmp_path / "runs", f"{project / 'flaky.py'}@flaky_task"
    outage = ct_fleet(runs, "eval", task, *FAST, *ONE_WORKER, CT_FAULT_ERROR="1")
    assert outage.returncode == 1, outage.stdout + outage.stderr
    assert "the tool service went down" in outage.stdout + outage.stderr
    kept = ct_fleet(runs, "eval", task, *FAST, *ONE_WORKER, "--no-retry-errors", "--json")
    assert kept.returncode == 1, kept.stdout + kept.stderr
    summary = RunSummary.model_validate_json(kept.stdout)
    assert (summary.already_done, summary.enqueued, summary.retried_errors) == (3, 0, 0)
    retried = ct_fleet(runs, "eval", task, *FAST, *ONE_WORKER)
    assert retried.returncode == 0, retried.stdout + retried.stderr
    assert "3 jobs (0 already done, 3 errored retried)" in " ".join(retried.stdout.split())
    (merged,) = (fleet_dir(runs) / "merged").glob("*.eval")
    log = read_eval_log(str(merged))
    assert log.status == "success" and [s.error for s in log.samples or []] == [None, None, None]
    assert not list((fleet_dir(runs) / "jobs").glob("*.errored"))  # the set-aside copies went with the retry
